"""The values an outbox row's columns take, a contract DBAs read: its ``status``, its ``outcome`` once it is
done, and the ``result`` each round ends with (what ``pod_sweeper.attempts.result`` records); and the one
rule of when a row's attempts are used up.

It belongs to neither side: the Kubernetes side says what an answer was, the daemon's answer table
(``tasks.rules.verdicts``) says which ``Result`` it means for the row, the database side records it and the
metrics count it, all from the same value, none deriving it again.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """Where a row is in its life (the ``status`` column)."""

    PENDING = "pending"
    CLAIMED = "claimed"
    DONE = "done"
    DEAD = "dead"


class Outcome(StrEnum):
    """How a finished row ended (the ``outcome`` column)."""

    DELETED = "deleted"
    ABSENT = "absent"
    REPLACED = "replaced"
    SKIPPED_ACTIVE = "skipped_active"
    WOULD_DELETE = "would_delete"
    DISCARDED = "discarded"  # by an operator (`pod-sweeper discard`), never by the daemon


class Result(StrEnum):
    """How one round of a row ended: done with an outcome, back to pending after a charged failure
    (``retry``) or uncharged (``handed_back``), or ``dead``."""

    DELETED = "deleted"
    ABSENT = "absent"
    REPLACED = "replaced"
    SKIPPED_ACTIVE = "skipped_active"
    WOULD_DELETE = "would_delete"
    RETRY = "retry"
    HANDED_BACK = "handed_back"
    DEAD = "dead"

    @property
    def status(self) -> Status:
        """The status the row takes."""
        if self in (Result.RETRY, Result.HANDED_BACK):
            return Status.PENDING
        return Status.DEAD if self is Result.DEAD else Status.DONE

    @property
    def outcome(self) -> Outcome | None:
        """The outcome the row ends with (done rows only)."""
        return Outcome(self.value) if self.status is Status.DONE else None


def exhausted(attempts: int, max_attempts: int) -> bool:
    """Whether a row that has been charged ``attempts`` attempts may take no more: the one place the
    rule is written (the answer table applies it to a failure, to an uncertain re-check and to a lease
    that expired)."""
    return attempts >= max_attempts
