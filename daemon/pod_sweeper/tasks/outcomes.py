"""What a DELETE's result means for its row: the answer table of docs/design.md as one pure function.

``decide`` takes what the request came back with (an :class:`~pod_sweeper.kube.api.Answer`, or the error it
raised, already sorted into our Kubernetes error types), the row's attempts so far, and whether a probe
found the API server down, and says how the row ends this round: done with an outcome, back to pending
after a backoff (charged), held (back to pending uncharged: a 429, or a server that cannot be reached),
dead, or refused (401/403, the daemon's fault: handed back uncharged while its gate closes). Attempts are
charged only for answers about the row itself. No I/O, no clock: the sweeper does the recording, this
module only decides, so every row of the table is unit-tested on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.errors import KubeError, KubeRejected, KubeRetryable, KubeUnauthorized
from pod_sweeper.core.outcome import Outcome
from pod_sweeper.kube.api import Answer

# A terminating pod is looked at again this long after its grace period ends.
CONFIRM_MARGIN_SECONDS = 5.0


class Verdict(StrEnum):
    DONE = "done"  # a terminal outcome
    RETRY = "retry"  # pending again after ``delay``
    DEAD = "dead"  # no more attempts, or a request that cannot succeed
    REFUSED = "refused"  # 401/403: not the row's fault
    HELD = "held"  # pending again after ``delay``, uncharged: a 429, or the API server is down


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    outcome: Outcome | None = None  # DONE
    http_status: int | None = None
    reason: str | None = None  # the API's reason, or the error's kind: the attempt history's column
    error: str | None = None  # what ``last_error`` says
    delay: float = 0.0  # RETRY: seconds until the row may be claimed again
    confirm_in: float | None = None  # DONE while the pod terminates: seconds until it is looked at again
    exhausted: bool = False  # DEAD because the attempts ran out (not because the request was rejected)


def needs_probe(result: Answer | BaseException) -> bool:
    """Whether this result could be the API server's trouble rather than the row's (no answer, or a
    5xx): only a probe of the server can tell, and only the row's own trouble is charged."""
    return isinstance(result, KubeRetryable) and (result.status is None or result.status >= 500)


def decide(
    result: Answer | BaseException, *, attempts: int, max_attempts: int, backoff: Backoff, server_down: bool = False
) -> Decision:
    """How the row ends this round, given what its request came back with (and, for a result that
    ``needs_probe``, whether the probe found the API server down)."""
    if isinstance(result, Answer):
        confirm_in = result.grace_seconds + CONFIRM_MARGIN_SECONDS if result.grace_seconds else None
        return Decision(Verdict.DONE, result.outcome, result.http_status, confirm_in=confirm_in)
    if isinstance(result, KubeUnauthorized):
        return Decision(Verdict.REFUSED, http_status=result.status, reason=result.reason, error=str(result))
    if isinstance(result, KubeRejected):
        return Decision(Verdict.DEAD, http_status=result.status, reason=result.reason, error=str(result))
    if isinstance(result, KubeRetryable):
        reason = result.reason or (type(result.__cause__).__name__ if result.__cause__ else None)
        if result.status == 429:  # the server's load, not the row: wait as asked, charge nothing
            delay = backoff.delay(max(attempts, 1), at_least=result.retry_after)
            return Decision(Verdict.HELD, http_status=429, reason=reason, error=str(result), delay=delay)
        if server_down and needs_probe(result):  # the outage gate holds every row; this one goes back
            return Decision(Verdict.HELD, http_status=result.status, reason=reason, error=str(result))
        return _retry_or_dead(str(result), result.status, result.retry_after, reason, attempts, max_attempts, backoff)
    # A bug or an answer nobody foresaw: uncertain, so the row is kept for another round.
    status = result.status if isinstance(result, KubeError) else None
    error = f"{type(result).__name__}: {result}"[:500]
    return _retry_or_dead(error, status, None, type(result).__name__, attempts, max_attempts, backoff)


def _retry_or_dead(
    error: str,
    status: int | None,
    retry_after: float | None,
    reason: str | None,
    attempts: int,
    max_attempts: int,
    backoff: Backoff,
) -> Decision:
    if attempts >= max_attempts:
        return Decision(Verdict.DEAD, http_status=status, reason=reason, error=error, exhausted=True)
    delay = backoff.delay(attempts, at_least=retry_after)
    return Decision(Verdict.RETRY, http_status=status, reason=reason, error=error, delay=delay)


def answer_label(result: Answer | BaseException) -> str:
    """The ``code`` label of ``pod_sweeper_kube_responses_total``: the HTTP status, or ``none``."""
    status = result.http_status if isinstance(result, Answer) else getattr(result, "status", None)
    return str(status or "none")
