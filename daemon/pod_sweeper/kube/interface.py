"""What the sweep pipeline and its watches ask of the API server, as an interface: ``SweepKube``. The
sender's DELETE, the outage watch's probe and the Events task's Event each end in an ``Answer``
(kube/answer.py), so the tasks read one shape whoever answers: ``kube.api.KubeClient`` is the real one,
over HTTP; the unit tests' ``ScriptedKube`` (tests/unit/sweep_kit.py) answers as it is told, in the same
shape. ``PodEvent``, what an Event says, lives here because the interface names it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pod_sweeper.kube.answer import Answer


@dataclass(frozen=True)
class PodEvent:
    """An Event to record on a pod the daemon deleted: why it went, for ``kubectl get events``."""

    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    replica: str
    at: datetime


class SweepKube(Protocol):
    """The three calls the sweep makes. Each is made from a worker thread and must be safe from many."""

    def delete_pod(self, namespace: str, name: str, uid: str, *, timeout: float, dry_run: bool = False) -> Answer:
        """DELETE the pod under its UID: what the server said, whatever it was (no answer, and a failure
        nobody foresaw, included). Never raises."""
        ...

    def probe(self, *, timeout: float) -> Answer:
        """Whether the API server answers at all: the answer of its health check (``needs_probe`` when it
        is down: no answer, or a 5xx)."""
        ...

    def create_event(self, event: PodEvent, *, timeout: float) -> Answer:
        """Create the Event; the answer when it was created, else a ``kube.errors.KubeError`` holding it."""
        ...
