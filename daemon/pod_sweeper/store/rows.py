"""The rows the sweep pipeline has in hand and the store writes, as data: a claimed row (``Claim``), how its
round ends (``Verdict``, with the request behind it, ``Attempt``), what one claim took
(``ClaimedBatch``), what the claim itself decides (``AtClaim``) from what the re-check found
(``Recheck``, through the host tables attached, ``AttachedTable``), the breaker's window as a claim reads
it, and what arming the wakeup flag found (``Arming``); and a deleted row the confirmer looks at again
(``Terminating``). The store's interface, the answer table (tasks/rules) and both stores import them from
here; nothing here does I/O, and nothing here imports a database library, even indirectly (an
import-linter contract, pyproject.toml)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from uuid import UUID

from pod_sweeper.core.states import Outcome, Result, Status


@dataclass(frozen=True)
class AttachedTable:
    """A host table attached (its row of ``pod_sweeper.attachments``), as data: which of its columns play
    which role, and its key columns' types (None once a key column or the table is gone). The statements
    that read the table through it are store/sweep/recheck.py's, whose ``Attachment`` adds the table's
    name as SQL."""

    id: int
    schema: str
    table: tuple[str, str]  # schema, name
    columns: dict[str, str]
    sandbox_id_type: str | None
    generation_type: str | None
    cluster: str  # every row's, unless columns maps a "cluster" column

    @property
    def present(self) -> bool:
        return self.sandbox_id_type is not None and self.generation_type is not None


@dataclass(frozen=True)
class Recheck:
    """What the claim-time re-check found: the rows whose generation is active again, those it could not
    check (with why), and the attachments it read them through (loaded again when a row named one the
    caller did not have: the caller keeps these, its own map is never changed)."""

    active: frozenset[int]  # outbox ids whose execution row is active again: never delete
    unknown: dict[int, str]  # outbox ids that could not be checked, with why: retry later
    attachments: Mapping[int, AttachedTable]


@dataclass(frozen=True)
class Claim:
    """A claimed row: what the sweeper needs to act on it and to record how it ended."""

    id: int
    epoch: int
    attachment_id: int
    sandbox_id: str
    generation: int
    pod_namespace: str
    pod_name: str
    pod_uid: UUID
    attempts: int  # charged so far, this claim's included
    reason: str
    lease_expired_from: str | None = None  # the replica whose lease on the row expired, when one had it


@dataclass(frozen=True)
class Attempt:
    """One request to the API server: when, how long, and the answer's reason."""

    started_at: datetime
    duration_ms: float
    reason: str | None


@dataclass(frozen=True)
class Verdict:
    """How one claimed row ends this round: its ``Result`` (which gives its status and outcome), whether
    the claim's attempt is charged, and what the record and the attempt history keep of it."""

    id: int
    epoch: int
    result: Result
    charged: bool = True  # False: the claim's attempt is given back (a fault of nobody the row answers for)
    delay: float = 0.0  # pending again: seconds until it may be claimed
    error: str | None = None
    http_status: int | None = None
    attempt: Attempt | None = None  # the request behind this result, for the attempt history
    confirm_in: float | None = None  # seconds until the terminating pod is looked at again

    @property
    def status(self) -> Status:
        return self.result.status

    @property
    def outcome(self) -> Outcome | None:
        return self.result.outcome


@dataclass(frozen=True)
class ClaimedBatch:
    """What one claim took: the rows whose DELETE is to be sent, and the rows whose round the claim
    itself ended (as ``at_claim`` said; recorded in the claim's own transaction)."""

    to_send: list[Claim]
    decided: list[tuple[Claim, Verdict]]
    attachments: Mapping[int, AttachedTable]  # the attachments the re-check read the rows through

    @property
    def taken(self) -> int:
        """Rows this claim took, however each ended (a short count: nothing more is due now)."""
        return len(self.to_send) + len(self.decided)


class LargeTransaction(Exception):
    """A claim found rows of one host transaction at least the breaker's transaction rule allows
    (``size``: this claim's share and the rows still pending; ``at``: the transaction's start, which its
    rows share as their enqueued_at); the claim was rolled back."""

    def __init__(self, size: int, at: datetime) -> None:
        super().__init__(f"one host transaction retired at least {size} executions")
        self.size, self.at = size, at


# What the claim itself decides of a claimed row, given the re-check: its Verdict, or None to send it.
AtClaim = Callable[[Claim, Recheck], "Verdict | None"]


@dataclass(frozen=True)
class BreakerWindow:
    """One cluster's breaker as the claim reads it (its row locked for the claim's transaction)."""

    tripped_reason: str | None  # None: closed
    deletes: dict[str, int]  # per namespace, since the later of a minute ago and the last resume
    claimed: int  # rows any replica has claimed right now: deletes that may still happen

    @property
    def total(self) -> int:
        return sum(self.deletes.values())


class Arming(Enum):
    """What an attempt to arm the wakeup flag before sleeping found (migration 0007, sql/arm.sql)."""

    ARMED = "armed"  # armed by this call: claim once more, rows committed before it were not announced
    ALREADY = "already"  # armed before: every retire since NOTIFYs, and a claim after it saw the rest
    DEFERRED = "deferred"  # an enqueue that may have read the flag clear is still open: look again soon
    NEEDED = "needed"  # (the turn's read of it) to be armed, in a statement of its own after the turn


@dataclass(frozen=True)
class Terminating:
    """A deleted row whose pod was left terminating, due for the confirmer's look
    (store/sweep/terminating.py)."""

    id: int
    pod_namespace: str
    pod_name: str
    pod_uid: str
    done_at: datetime
    stuck_at: datetime | None
    age_seconds: float  # since done_at, on the database's clock (never a replica's wall clock)
