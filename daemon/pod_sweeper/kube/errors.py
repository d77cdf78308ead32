"""The one exception the Kubernetes side raises: ``KubeError``, which carries the request's ``Answer``.

Calls other than the DELETE (a GET, a list, an access review, an Event) raise it for every answer
that is not a success; what the answer is, its reader asks of ``exc.answer`` (``said``,
``needs_probe``), never of a status code or of the exception's type.
"""

from __future__ import annotations

from pod_sweeper.core.errors import PodSweeperError
from pod_sweeper.kube.answer import Answer


class KubeError(PodSweeperError):
    """An answer from the Kubernetes API that is not a success, or no answer at all."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(str(answer))
        self.answer = answer
