"""The answer table of docs/design.md: what each answer, error, re-check or refusal means for a row, as
pure functions that return the row's ``Verdict`` (its ``Result``, whether the attempt is charged, when it is
due again, what ``last_error`` says). The sender and the claimer only apply what these return; the record
(``sql/record_results.sql``) and the metrics read the same ``Result``, never working it out again.

- ``decide``: a DELETE was sent; what came back (its ``kube.answer.Answer``, read by its ``said``, never
  by its status), and, for no answer or a 5xx, whether the outage watch found the API server down.
- ``at_claim``: before anything is sent: a lease that expired with its attempts used up, a generation
  active again, a re-check that could not be made.
- ``unsendable``, ``handed_back``: a row no request may be sent for; a row a gate, a stop or the
  server sends back uncharged.

Attempts are charged only for answers about the row itself; "used up" is ``core.states.exhausted``.
No I/O and no clock, so every row of the table is a unit test (tests/unit/test_verdicts.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.states import Result, exhausted
from pod_sweeper.kube.answer import Answer, Said
from pod_sweeper.store.rows import Attempt, Claim, Recheck, Verdict
from pod_sweeper.tasks.rules.gates import Refusal

# A terminating pod is looked at again this long after its grace period ends.
CONFIRM_MARGIN_SECONDS = 5.0


@dataclass(frozen=True)
class Policy:
    """What a row's own trouble costs: how many attempts it has, and the backoff between them."""

    max_attempts: int
    backoff: Backoff


@dataclass(frozen=True)
class Sent:
    """One row's request as it went: when it started (wall clock), when it went on the wire (``sent``,
    on the outage watch's clock: after the client's credential hook, as the client says in
    ``Answer.left``; the sender's own stamp, taken before the call, when the client cannot say), how long
    the call took (the hook included: what the sweep waited), and what came back."""

    started_at: datetime
    sent: float
    seconds: float
    answer: Answer

    @property
    def attempt(self) -> Attempt:
        """The attempt history's row of it (its reason: the API's, or the failure's kind)."""
        return Attempt(self.started_at, self.seconds * 1000, self.answer.reason)


def decide(
    claim: Claim, sent: Sent, policy: Policy, *, unreachable: str | None = None, refusal: Refusal | None = None
) -> Verdict:
    """How the row ends this round, given what its DELETE came back with. ``unreachable``: the outage
    watch's reason when it found the API server down (an answer that ``needs_probe`` only); ``refusal``:
    the gate's answer to a 401 or 403."""
    answer, attempt, status = sent.answer, sent.attempt, sent.answer.status
    match answer.said:
        case Said.DONE if answer.dry_run:
            return Verdict(claim.id, claim.epoch, Result.WOULD_DELETE, http_status=status, attempt=attempt)
        case Said.DONE:
            confirm_in = answer.grace_seconds + CONFIRM_MARGIN_SECONDS if answer.grace_seconds else None
            return Verdict(
                claim.id, claim.epoch, Result.DELETED, http_status=status, attempt=attempt, confirm_in=confirm_in
            )
        case Said.NOT_FOUND:
            return Verdict(claim.id, claim.epoch, Result.ABSENT, http_status=status, attempt=attempt)
        case Said.CONFLICT if answer.holder_uid is None:  # ours vanished between the DELETE and the GET
            return Verdict(claim.id, claim.epoch, Result.ABSENT, http_status=status, attempt=attempt)
        case Said.CONFLICT if answer.holder_uid != str(claim.pod_uid):  # another pod holds the name: left alone
            return Verdict(claim.id, claim.epoch, Result.REPLACED, http_status=status, attempt=attempt)
        case Said.CONFLICT:
            return _charged(claim, f"409 Conflict but the pod still has uid {claim.pod_uid}", status, attempt, policy)
        case Said.UNAUTHORIZED | Said.FORBIDDEN:
            # The daemon's fault (its credentials; its RBAC there), not the row's: back, uncharged.
            assert refusal is not None, "a 401 or 403 is the gate's to take first"
            return handed_back(claim, delay=refusal.delay, error=refusal.error, http_status=status, attempt=attempt)
        case Said.UNSENT:
            # Never on the wire (no credential could be had): the daemon's fault, and no attempt to keep.
            assert refusal is not None, "a request never sent is the auth gate's to take first"
            return handed_back(claim, delay=refusal.delay, error=refusal.error)
        case Said.THROTTLED:  # the server's load, not the row: wait as long as asked, charge nothing
            delay = policy.backoff.delay(max(claim.attempts, 1), at_least=answer.retry_after)
            return handed_back(claim, delay=delay, error=str(answer), http_status=status, attempt=attempt)
        case Said.REJECTED:  # the request itself is wrong
            return Verdict(claim.id, claim.epoch, Result.DEAD, error=str(answer), http_status=status, attempt=attempt)
        case Said.NO_ANSWER | Said.SERVER_ERROR if unreachable is not None:  # the outage gate holds every row
            return handed_back(claim, error=unreachable, http_status=status, attempt=attempt)
        case Said.NO_ANSWER | Said.SERVER_ERROR | Said.UNFORESEEN:
            # The row's own trouble, or a bug nobody foresaw: uncertain, so kept for another round.
            return _charged(claim, str(answer), status, attempt, policy)


def _charged(claim: Claim, error: str, status: int | None, attempt: Attempt | None, policy: Policy) -> Verdict:
    """The row's own trouble: pending again after its backoff, or dead once its attempts are used up."""
    if exhausted(claim.attempts, policy.max_attempts):
        return Verdict(claim.id, claim.epoch, Result.DEAD, error=error, http_status=status, attempt=attempt)
    delay = policy.backoff.delay(claim.attempts)
    return Verdict(claim.id, claim.epoch, Result.RETRY, delay=delay, error=error, http_status=status, attempt=attempt)


def at_claim(claim: Claim, recheck: Recheck, policy: Policy) -> Verdict | None:
    """What the claim itself decides, before any request: None when the DELETE is to be sent."""
    if claim.lease_expired_from is not None and exhausted(claim.attempts - 1, policy.max_attempts):
        # It crashed or froze its daemon as many times as it has attempts: claiming it again would only
        # take the next one down. (Its attempts stay as they were: this claim is given back.)
        error = (
            f"lease of {claim.lease_expired_from} expired after {claim.attempts - 1} attempts: "
            "the daemon holding it stopped answering"
        )
        return Verdict(claim.id, claim.epoch, Result.DEAD, charged=False, error=error)
    if claim.id in recheck.active:  # a newer activation owns the pod
        return Verdict(claim.id, claim.epoch, Result.SKIPPED_ACTIVE)
    if (why := recheck.unknown.get(claim.id)) is not None:  # uncertain: never a delete, a retry
        return _charged(claim, why, None, None, policy)
    return None


def unsendable(claim: Claim, why: str) -> Verdict:
    """A row no request may be sent for (a name Kubernetes could not hold, a namespace out of scope)."""
    return Verdict(claim.id, claim.epoch, Result.DEAD, error=why)


def handed_back(
    claim: Claim,
    *,
    delay: float = 0.0,
    error: str | None = None,
    http_status: int | None = None,
    attempt: Attempt | None = None,
) -> Verdict:
    """Back to pending, uncharged: a fault of nobody the row answers for (a stop, a gate, the server)."""
    return Verdict(
        claim.id,
        claim.epoch,
        Result.HANDED_BACK,
        charged=False,
        delay=delay,
        error=error,
        http_status=http_status,
        attempt=attempt,
    )
