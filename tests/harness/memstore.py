"""The outbox in memory: a ``store.interface.SweepStore`` for unit tests of the sweep pipeline's tasks
(the claimer, the sender, the recorder, the drain) without PostgreSQL, on a ``FakeClock``.

It keeps what the SQL under ``sql/`` keeps for the rows the pipeline touches, and nothing else: a claim
takes due rows in due order, bumps each one's epoch and charges its attempt, takes over an expired lease
(saying whose it was) and records at once what ``at_claim`` ends; a record is fenced on the epoch and
the claimed status, gives an uncharged attempt back, and sets the due time of a row pending again.
``tests/integration/test_store_contract.py`` runs the same scenarios on it and on the real store and
compares every row. Not modelled: several replicas' row locks (each statement is applied whole, one
at a time), pauses and holds beyond ``keep`` (no scope but a namespace or a pod, no ``until``), the
attempt history's columns beyond the result.

What a test may look at or arrange: ``rows`` (by id), ``writes`` (every ``record_results`` call's
ids, in order), ``activate`` (a generation active again: the re-check finds it), ``fail`` (the next
calls of a method raise a database error), ``arm_refusals``, ``claim_returns`` (a claim's rows are
taken, and its answer comes back only once the event is set: a commit whose answer is still on its way),
``record_waits`` (a write begins, and goes on only once the event is set: a writer inside its write).

For the simulator (tests/sim), additions only, none of which a unit test's store uses unless asked:
``view`` (another replica's statements on the same rows, each statement still applied whole: what
``FOR UPDATE SKIP LOCKED`` and the lease give PostgreSQL's replicas, one statement at a time), ``keep``
(a hold of one pod's rows or a pause of a namespace: kept rows are neither claimed nor due, as
``pod_sweeper.keeping`` keeps them; rows claimed before are not recalled), ``retire``'s ``uid``, and the
confirmer's two statements (``terminating``: sql/confirm_claim.sql and sql/confirm_result.sql over the
columns a record keeps for them, ``done_at`` and the confirmation's, each a time on the store's clock),
and the breaker's surge watch's three (``arrivals``, ``recent_rate`` and ``trip``: sql/breaker_arrivals.sql,
sql/breaker_recent_rate.sql and sql/breaker_trip.sql over ``enqueued_at``, the breaker's reason and the
time of its last reset, ``reset_at``, which ``reset_breaker`` sets as sql/breaker_reset.sql does).
And the replication guard (migration 0014): a WAL insert position (``replication.position``) that every
write applied advances (an enqueue or a reopen, ``reopen``, each statement that changes something; each
row's ``enqueue_lsn`` is its enqueue's), the standbys by name with their flush positions as
``pg_stat_replication`` shows them (``replication.standbys``; missing or None: not connected), each row's
mark (``guard_lsn``, ``guard_enqueued_at``) as sql/guard_mark.sql sets it, and ``claim``, ``next_due``
(with the view's ``guard`` and its look-again interval, ``GUARD_RECHECK``, as
``OutboxStore`` keeps them) and ``row_reasons`` honouring it as sql/claim.sql, sql/next_due.sql and
sql/row_waits.sql do.
And the outage watch's row (``outages``, pod_sweeper.outages, one per replica): ``report_outage`` and
``clear_outage`` write it as sql/outage_report.sql and sql/outage_clear.sql do (the first report's
``since`` kept, ``probed_at`` the store's clock), and ``row_reasons`` gives ``kube_unreachable`` while
one was probed within ``OUTAGE_FRESH_SECONDS``, as sql/row_waits.sql does (every report is of this
store's one cluster; the writes are not of the WAL the replication guard reads: they move no row).
And the breaker's transaction rule (migration 0020, ``harness.memlarge``): each
row's host transaction (``Row.transaction``: ``retire``'s ``transaction``, else one of its own), the
large transactions the claims find (``transactions``), ``claim`` raising ``LargeTransaction`` as
``OutboxStore``'s does, ``keep_back_transaction`` keeping its rows back, ``end_transaction`` (the
on-call's ``release-transaction`` and ``discard-transaction``) and ``row_reasons`` giving
``large_transaction``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from harness.clock import FakeClock
from harness.memlarge import KEPT_BACK_UNTIL, HostTransactions
from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.states import Outcome, Result, Status
from pod_sweeper.core.waits import DUE, ROW_ORDER, UNSWEPT_AFTER_SECONDS, Wait
from pod_sweeper.store.interface import StoreError
from pod_sweeper.store.rows import (
    Arming,
    AtClaim,
    BreakerWindow,
    Claim,
    ClaimedBatch,
    LargeTransaction,
    Recheck,
    Terminating,
    Verdict,
)

BREAKER_WINDOW_SECONDS = 60.0
# store.sweep.outbox.GUARD_RECHECK's bounds (that module loads psycopg, which this one must not; the store
# contract test holds the two equal): how soon a read that found the guard keeping rows back looks again.
GUARD_RECHECK_SECONDS = (0.05, 5.0)
GUARD_RECHECK = Backoff(*GUARD_RECHECK_SECONDS)
# sql/row_waits.sql: an outage report keeps the rows back while it was probed within this (2 minutes).
OUTAGE_FRESH_SECONDS = 120.0


@dataclass
class Row:
    """One outbox row, with the columns the pipeline reads and writes."""

    id: int
    sandbox_id: str
    generation: int
    pod_namespace: str
    pod_name: str
    pod_uid: uuid.UUID
    next_attempt_at: float
    status: Status = Status.PENDING
    attempts: int = 0
    claim_epoch: int = 0
    claimed_by: str | None = None
    outcome: Outcome | None = None
    last_error: str | None = None
    last_http_status: int | None = None
    reason: str = "retired"
    results: list[Result] = field(default_factory=list)  # the attempt history's results, recorded or not
    # The confirmation's columns (sql/record_results.sql, sql/confirm_*.sql), times on the store's clock.
    done_at: float | None = None
    confirm_after: float | None = None
    confirmed_at: float | None = None
    stuck_at: float | None = None
    enqueued_at: float = 0.0  # the retire's time (its transaction's start: the rows of one share it)
    # The replication guard (migration 0014): the WAL position of the enqueue (or reopen) this row is of,
    # and the mark sql/guard_mark.sql sets: the insert position then, and the enqueue it vouches for.
    enqueue_lsn: int = 0
    guard_lsn: int | None = None
    guard_enqueued_at: float | None = None
    # The host transaction that retired it (migration 0020's key is its start, ``enqueued_at``; here an id
    # whoever retires the row decides, since many transactions may begin at one virtual instant).
    transaction: int = 0


@dataclass
class Outage:
    """A replica's report that its API server cannot be reached (a row of pod_sweeper.outages), times
    on the store's clock."""

    since: float
    reason: str
    probed_at: float


@dataclass
class Replication:
    """The primary's WAL insert position (each write applied advances it by one; ``at[i]``: when position
    ``i + 1`` was written) and the standbys as ``pg_stat_replication`` shows them: name -> flush position
    (missing or None: not connected). Shared by every view of one store."""

    position: int = 0
    at: list[float] = field(default_factory=list)
    standbys: Mapping[str, int | None] = field(default_factory=dict)

    def flushed(self, guard: Sequence[str]) -> int | None:
        """What every standby ``guard`` names has flushed (sql/claim.sql's ``standbys``); None: one of them
        is not connected."""
        positions = [self.standbys.get(name) for name in guard]
        return None if any(p is None for p in positions) else min(p for p in positions if p is not None)


class MemoryStore:
    """One cluster's outbox for one replica (``replica``), on ``clock``."""

    def __init__(self, clock: FakeClock, *, replica: str = "memory") -> None:
        self.clock, self.replica = clock, replica
        self.rows: dict[int, Row] = {}
        self.writes: list[list[int]] = []  # each record_results call's ids, as given
        self.armed = False
        self.arm_refusals = 0  # the next arms that find an enqueue still open
        self.handed_on = 0  # times a replica handed its wakeups on (SweepSession.hand_on)
        self.claims = 0  # claim statements run
        self.looks = 0  # next-due reads in a claimer's turn (each moves the real store's claim cursor)
        self.tripped: str | None = None
        self.reset_at = float("-inf")  # the breaker's last reset (sql/breaker_reset.sql)
        self.claim_returns: asyncio.Event | None = None  # set: a claim's answer waits for it
        self.record_waits: asyncio.Event | None = None  # set: a record_results call waits for it to go on
        self._active: set[tuple[str, int]] = set()
        self._failing: dict[str, int] = {}
        self._deleted_at: list[tuple[float, str]] = []  # (when, namespace): the breaker's window
        self._kept: set[str] = set()  # held pod UIDs ("uid:<uid>") and paused namespaces ("ns:<name>")
        self.replication = Replication()  # the WAL and the standbys (the replication guard's)
        self.guard: list[str] | None = None  # the standbys this view's replica's guard names (None: off)
        self.guard_waits = 0  # next-due reads in a row the guard kept rows back at (OutboxStore's)
        self.outages: dict[tuple[str, str], Outage] = {}  # (cluster, replica) -> its outage report
        self.transactions = HostTransactions()  # the host transactions and the large ones found (shared)

    # --- arranging and reading, for the tests -------------------------------------------------------

    def retire(
        self,
        sandbox_id: str,
        *,
        generation: int = 1,
        namespace: str = "sandboxes",
        name: str = "",
        uid: uuid.UUID | None = None,
        transaction: int | None = None,
    ) -> Row:
        """What the trigger enqueues when a generation is retired: a row due now (its pod's UID drawn
        unless given), of the host transaction ``transaction`` (``transactions.begin()``; None: one of its
        own). As its ``ON CONFLICT (pod_uid)``: a pod's row already there is reopened only when
        it ended ``skipped_active`` (the generation was active again at its claim), else left as it is."""
        if uid is not None and (row := next((r for r in self.rows.values() if r.pod_uid == uid), None)):
            if self.reopen(row, sandbox_id=sandbox_id, generation=generation, name=name or f"pod-{sandbox_id}"):
                row.pod_namespace = namespace
            return row
        row = Row(
            len(self.rows) + 1,
            sandbox_id,
            generation,
            namespace,
            name or f"pod-{sandbox_id}",
            uid or uuid.uuid4(),
            self.clock(),
            enqueued_at=self.clock(),
            transaction=self.transactions.begin() if transaction is None else transaction,
        )
        row.enqueue_lsn = self.wrote()
        self.rows[row.id] = row
        return row

    def reopen(
        self,
        row: Row,
        *,
        sandbox_id: str | None = None,
        generation: int | None = None,
        name: str | None = None,
        reason: str = "retired",
    ) -> bool:
        """A later enqueue of a row's pod UID (``pod_sweeper.enqueue``'s ON CONFLICT (pod_uid)): a row that
        ended skipped_active is pending again, due now, with the new enqueue's key, name and reason, a new
        enqueue time and WAL position; any other is left as it is. Whether it was reopened."""
        if row.status is not Status.DONE or row.outcome is not Outcome.SKIPPED_ACTIVE:
            return False
        now = self.clock()
        self._active.discard((row.sandbox_id, row.generation))
        row.sandbox_id = row.sandbox_id if sandbox_id is None else sandbox_id
        row.generation = row.generation if generation is None else generation
        row.pod_name = row.pod_name if name is None else name
        row.status, row.outcome, row.attempts, row.next_attempt_at = Status.PENDING, None, 0, now
        row.last_error = row.last_http_status = row.done_at = None
        row.enqueued_at, row.enqueue_lsn, row.reason = now, self.wrote(), reason
        row.transaction = self.transactions.begin()  # a new enqueue: a transaction of its own
        return True

    def wrote(self) -> int:
        """A write applied: the WAL insert position moves on; the position of that write."""
        replication = self.replication
        replication.position += 1
        replication.at.append(self.clock())
        return replication.position

    def guard_keeps_back(self, row: Row, guard: Sequence[str]) -> bool:
        """Whether a guard naming ``guard`` keeps the row from a claim: its mark does not vouch for its
        enqueue, or a named standby has not flushed the mark (or is not connected)."""
        flushed = self.replication.flushed(guard)
        current = row.guard_enqueued_at == row.enqueued_at and row.guard_lsn is not None
        return not (current and flushed is not None and row.guard_lsn is not None and row.guard_lsn <= flushed)

    def activate(self, sandbox_id: str, generation: int = 1) -> None:
        """The generation is active again: the claim's re-check finds it so."""
        self._active.add((sandbox_id, generation))

    def view(self, replica: str) -> MemoryStore:
        """Another replica's store on this outbox: the rows, the generations active again, the breaker's
        window and the holds and pauses are shared; the counts, the failures asked for, the wakeup flag
        and the breaker's reason are the view's own."""
        other = MemoryStore(self.clock, replica=replica)
        other.rows, other._active, other._deleted_at, other._kept = (
            self.rows,
            self._active,
            self._deleted_at,
            self._kept,
        )
        other.replication = self.replication
        other.outages = self.outages
        other.transactions = self.transactions
        return other

    def keep(self, *, pod_uid: uuid.UUID | None = None, namespace: str | None = None, kept: bool = True) -> None:
        """Hold one pod's rows (``pod_uid``) or pause a namespace; ``kept=False`` ends it."""
        key = f"uid:{pod_uid}" if pod_uid is not None else f"ns:{namespace}"
        if kept:
            self._kept.add(key)
        else:
            self._kept.discard(key)

    def discard(self, ids: list[int]) -> list[int]:
        """``pod-sweeper discard`` (sql/discard.sql): these rows, if still pending or dead, end done with
        outcome discarded (a claimed row is left to its replica); the ids discarded."""
        discarded = []
        for row_id in ids:
            row = self.rows.get(row_id)
            if row is not None and row.status in (Status.PENDING, Status.DEAD):
                row.status, row.outcome = Status.DONE, Outcome.DISCARDED
                row.next_attempt_at, row.last_error, row.done_at = self.clock(), None, self.clock()
                discarded.append(row_id)
        return discarded

    def row_reasons(
        self,
        *,
        tripped: bool | None = None,
        guards: Sequence[Sequence[str]] = (),
        fleet: bool = True,
    ) -> dict[int, str]:
        """What sql/row_waits.sql says of each open row (``store.reads.waits.row_reasons``): every reason
        that applies, the first of them in ``core.waits.ROW_ORDER`` (``DUE``: none). ``tripped``: the breaker's
        state when another's than this view's (the simulator's world keeps it). The replication guard's: ``guards``,
        the standbys each replica of the cluster's fleet (``pod_sweeper.replicas``: the live ones, else the
        last known) names, those with the guard on; ``fleet``: whether any replica of the cluster is known
        (none: a row whose mark vouches for its enqueue is kept back too)."""
        now, kept = self.clock(), self._kept
        tripped = self.tripped is not None if tripped is None else tripped
        unreachable = self.unreachable()
        reasons: dict[int, str] = {}
        for row in self.rows.values():
            if row.status not in (Status.PENDING, Status.CLAIMED):
                continue
            waiting = row.next_attempt_at > now
            applies = {
                Wait.CLAIMED: row.status is Status.CLAIMED and waiting,
                Wait.HELD: bool(kept) and f"uid:{row.pod_uid}" in kept,
                Wait.PAUSED: bool(kept) and f"ns:{row.pod_namespace}" in kept,
                Wait.LARGE_TRANSACTION: bool(self.transactions.found) and self.transactions.keeping(row) is not None,
                Wait.BREAKER: tripped,
                Wait.REPLICATION_GUARD: (bool(guards) and any(self.guard_keeps_back(row, guard) for guard in guards))
                or (not fleet and row.guard_enqueued_at == row.enqueued_at),
                Wait.KUBE_UNREACHABLE: unreachable,
                Wait.KUBE_UNAUTHORIZED: waiting and row.last_http_status == 401,
                Wait.NAMESPACE_REFUSED: waiting and row.last_http_status == 403,
                Wait.BACKOFF: waiting,
                Wait.UNSWEPT: row.next_attempt_at <= now - UNSWEPT_AFTER_SECONDS,
            }
            reasons[row.id] = next((wait.value for wait in ROW_ORDER if applies.get(wait)), DUE)
        return reasons

    def report_outage(self, *, cluster: str, replica: str, reason: str, closed_for: float) -> None:
        """sql/outage_report.sql: the replica cannot reach its API server, since ``closed_for`` seconds ago
        (a report already there keeps its ``since`` and takes the new reason); probed now."""
        now = self.clock()
        report = self.outages.get((cluster, replica))
        if report is None:
            self.outages[(cluster, replica)] = Outage(now - closed_for, reason, now)
        else:
            report.reason, report.probed_at = reason, now

    def clear_outage(self, *, cluster: str, replica: str) -> None:
        """sql/outage_clear.sql: the replica's API server answers again."""
        self.outages.pop((cluster, replica), None)

    def unreachable(self) -> bool:
        """Whether an outage report keeps the rows (sql/row_waits.sql's ``kube_unreachable``): one probed
        within ``OUTAGE_FRESH_SECONDS``."""
        now = self.clock()
        return any(report.probed_at > now - OUTAGE_FRESH_SECONDS for report in self.outages.values())

    def take_terminating(self, *, batch: int, recheck_seconds: float) -> list[Terminating]:
        """sql/confirm_claim.sql: up to ``batch`` deleted rows whose look is due, oldest due first, each put
        off by ``recheck_seconds``; each with its age since ``done_at`` on the store's clock."""
        now = self.clock()
        due = sorted(
            (
                r
                for r in self.rows.values()
                if r.confirm_after is not None
                and r.confirm_after <= now
                and r.confirmed_at is None
                and r.status is Status.DONE
                and r.outcome is Outcome.DELETED
                and r.done_at is not None
            ),
            key=lambda r: (r.confirm_after or 0.0, r.id),
        )[:batch]
        taken = []
        for row in due:
            assert row.done_at is not None
            row.confirm_after = now + recheck_seconds
            stuck_at = None if row.stuck_at is None else datetime.fromtimestamp(row.stuck_at, UTC)
            taken.append(
                Terminating(
                    row.id,
                    row.pod_namespace,
                    row.pod_name,
                    str(row.pod_uid),
                    datetime.fromtimestamp(row.done_at, UTC),
                    stuck_at,
                    now - row.done_at,
                )
            )
        return taken

    def record_terminating(self, *, ids: list[int], gone: list[bool], stuck: list[bool]) -> None:
        """sql/confirm_result.sql: each look's finding, on rows still done and deleted."""
        now = self.clock()
        for row_id, was_gone, was_stuck in zip(ids, gone, stuck, strict=True):
            row = self.rows.get(row_id)
            if row is None or row.status is not Status.DONE or row.outcome is not Outcome.DELETED:
                continue
            row.confirmed_at = now if was_gone else None
            row.confirm_after = None if was_gone else row.confirm_after
            if was_stuck and row.stuck_at is None:
                row.stuck_at = now

    def arrivals(
        self,
        *,
        window: float,
        dry_run: bool = False,
        shadow: tuple[str, ...] = (),
        transaction_rows: int = 0,
        reset_at: float | None = None,
    ) -> int:
        """sql/breaker_arrivals.sql: the host's retires enqueued within the last ``window`` seconds and
        since the breaker's last reset (``reset_at``: another's than this view's, the simulator's world
        keeps it), open ones that no hold, pause or dry run keeps and done ones not recorded as
        would_delete; none of a host transaction (``Row.transaction``) of ``transaction_rows`` or more. The
        count alone (the statement's ``arrived``; its ``tripped_reason`` is ``tripped``)."""
        now = self.clock()
        since = max(now - window, self.reset_at if reset_at is None else reset_at)
        by_transaction: dict[int, int] = {}
        for row in self.rows.values():
            if row.enqueued_at <= since or row.reason not in ("retired", "row_deleted"):
                continue
            if row.status in (Status.PENDING, Status.CLAIMED):
                counted = (
                    row.next_attempt_at > since
                    and not dry_run
                    and row.pod_namespace not in shadow
                    and not self.is_kept(row)
                )
            else:
                done_at = row.done_at
                counted = (
                    row.status is Status.DONE
                    and done_at is not None
                    and done_at > since
                    and row.outcome is not Outcome.WOULD_DELETE
                )
            if counted:
                by_transaction[row.transaction] = by_transaction.get(row.transaction, 0) + 1
        return sum(n for n in by_transaction.values() if not transaction_rows or n < transaction_rows)

    def recent_rate(self, *, seconds: float) -> float:
        """sql/breaker_recent_rate.sql: the host's retires a second over the last ``seconds`` (open, or done
        within them)."""
        since = self.clock() - seconds
        arrived = 0
        for row in self.rows.values():
            if row.enqueued_at <= since or row.reason not in ("retired", "row_deleted"):
                continue
            done_at = row.done_at
            if row.status in (Status.PENDING, Status.CLAIMED) or (
                row.status is Status.DONE and done_at is not None and done_at > since
            ):
                arrived += 1
        return arrived / seconds

    def trip(self, reason: str) -> None:
        """sql/breaker_trip.sql: the breaker tripped, once (a tripped breaker keeps its first reason)."""
        if self.tripped is None:
            self.tripped = reason

    def reset_breaker(self) -> None:
        """sql/breaker_reset.sql: the breaker closed, and its arrivals counted from now."""
        self.tripped, self.reset_at = None, self.clock()
        self.transactions.reset_at = self.reset_at  # breaker.resumed_at: the transaction rule reads it too

    def end_transaction(self, transaction_id: int, *, how: str) -> dict[str, int] | None:
        """``pod-sweeper release-transaction ID`` (``how="released"``) or ``discard-transaction ID``
        (``"discarded"``), as ``store.admin.controls.end_transaction`` (sql/large_transaction_end.sql): its
        id, open rows (before) and rows discarded; None when unknown or ended already."""
        ended = self.transactions.end(self.rows.values(), transaction_id, how=how, now=self.clock())
        if ended is None:
            return None
        self.wrote()
        return {"id": transaction_id, "open_rows": ended[0], "discarded": ended[1]}

    def is_kept(self, row: Row) -> bool:
        """Whether a hold or a pause keeps the row back now."""
        kept = self._kept
        return bool(kept) and (f"uid:{row.pod_uid}" in kept or f"ns:{row.pod_namespace}" in kept)

    def fail(self, method: str, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` raise a database error, as a lost connection would."""
        self._failing[method] = times

    def in_status(self, status: Status) -> list[Row]:
        return [row for row in self.rows.values() if row.status is status]

    # --- the interface ---------------------------------------------------------------------------------

    def rediscover_in(self) -> float | None:
        return None  # its claims read every row: no floor

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[MemorySession]:
        self._maybe_fail("session")
        yield MemorySession(self)

    def _maybe_fail(self, method: str) -> None:
        left = self._failing.get(method, 0)
        if left:
            self._failing[method] = left - 1
            raise StoreError(f"the memory store's {method} failed, as the test asked")


class MemorySession:
    """A session of the memory store: each method is one statement, applied whole or not at all."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._found: dict[datetime, int] = {}  # a large transaction's start, as its claim raised it -> its id

    def transaction(self) -> AbstractAsyncContextManager[object]:
        return contextlib.nullcontext()

    async def claim(
        self,
        *,
        batch: int,
        lease_seconds: float,
        disarm: bool,
        at_claim: AtClaim,
        guard: list[str] | None,
        transaction_rows: int = 0,
        gathering: bool = False,
    ) -> ClaimedBatch:
        store = self._store
        store._maybe_fail("claim")
        store.claims += 1
        now = store.clock()
        due = sorted(
            (
                r
                for r in store.rows.values()
                if r.status in (Status.PENDING, Status.CLAIMED)
                and r.next_attempt_at <= now
                and not store.is_kept(r)
                and (guard is None or not store.guard_keeps_back(r, guard))
            ),
            key=lambda r: (r.next_attempt_at, r.id),
        )[:batch]
        # The breaker's transaction rule (store/sweep/outbox.py): the claim rolled back, nothing changed.
        if transaction_rows and (large := store.transactions.judge(due, store.rows.values(), transaction_rows)):
            size, key = large
            at = datetime.fromtimestamp(next(r.enqueued_at for r in due if r.transaction == key), UTC)
            self._found[at] = key
            raise LargeTransaction(size, at)
        # Only a full batch clears it, or a gathering turn's that takes a row (sql/claim.sql).
        if disarm and (len(due) >= batch or (gathering and due)):
            store.armed = False
        claims = []
        for row in due:
            expired_from = row.claimed_by if row.status is Status.CLAIMED else None
            row.status, row.claimed_by = Status.CLAIMED, store.replica
            row.attempts += 1
            row.claim_epoch += 1
            row.next_attempt_at = now + lease_seconds
            claims.append(
                Claim(
                    row.id,
                    row.claim_epoch,
                    1,
                    row.sandbox_id,
                    row.generation,
                    row.pod_namespace,
                    row.pod_name,
                    row.pod_uid,
                    row.attempts,
                    row.reason,
                    expired_from,
                )
            )
        if claims:
            store.wrote()
        active = frozenset(c.id for c in claims if (c.sandbox_id, c.generation) in store._active)
        checked = Recheck(active, {}, {})
        decided = [(c, verdict) for c in claims if (verdict := at_claim(c, checked)) is not None]
        if decided:
            self._record([verdict for _, verdict in decided])
        ended = {c.id for c, _ in decided}
        if store.claim_returns is not None:  # taken ("committed"); the answer still on its way
            await store.claim_returns.wait()
        return ClaimedBatch([c for c in claims if c.id not in ended], decided, {})

    async def guard_mark(self) -> int:
        """sql/guard_mark.sql: the open rows whose enqueue no mark vouches for yet, marked with the WAL
        insert position now and the enqueue they are of; how many."""
        store = self._store
        store._maybe_fail("guard_mark")
        position = store.replication.position
        marked = [
            r
            for r in store.rows.values()
            if r.status in (Status.PENDING, Status.CLAIMED) and r.guard_enqueued_at != r.enqueued_at
        ][:5000]
        for row in marked:
            row.guard_lsn, row.guard_enqueued_at = position, row.enqueued_at
        if marked:
            store.wrote()
        return len(marked)

    async def record_results(self, verdicts: list[Verdict]) -> set[int]:
        if self._store.record_waits is not None:  # a writer inside its write, held there
            await self._store.record_waits.wait()
        self._store._maybe_fail("record_results")
        self._store.writes.append([verdict.id for verdict in verdicts])
        return self._record(verdicts)

    def _record(self, verdicts: list[Verdict]) -> set[int]:
        store, now = self._store, self._store.clock()
        owned: set[int] = set()
        for verdict in verdicts:
            row = store.rows.get(verdict.id)
            if row is None:
                continue
            if verdict.attempt is not None:
                row.results.append(verdict.result)
            if row.claim_epoch != verdict.epoch or row.status is not Status.CLAIMED:
                continue  # fenced: another replica took the lease over
            owned.add(row.id)
            row.status, row.outcome = verdict.status, verdict.outcome
            if not verdict.charged:
                row.attempts -= 1
            if verdict.status is Status.PENDING:
                row.next_attempt_at = now + verdict.delay
            if verdict.status is Status.DONE:
                row.last_error, row.last_http_status = None, verdict.http_status
            else:
                row.last_error = verdict.error or row.last_error
                row.last_http_status = verdict.http_status or row.last_http_status
            if verdict.result is Result.DELETED:
                store._deleted_at.append((now, row.pod_namespace))
            row.done_at = now if verdict.status is Status.DONE else None
            row.confirm_after = None if verdict.confirm_in is None else now + verdict.confirm_in
            deleted = verdict.outcome is Outcome.DELETED
            row.confirmed_at = now if deleted and verdict.confirm_in is None else None
        if owned:
            store.wrote()
        return owned

    async def next_due(self) -> float | None:
        store = self._store
        store._maybe_fail("next_due")
        now, guard = store.clock(), store.guard
        open_rows = [
            r
            for r in store.rows.values()
            if r.status in (Status.PENDING, Status.CLAIMED)
            and not store.is_kept(r)
            and r.next_attempt_at < KEPT_BACK_UNTIL  # a large transaction's: past next_due.sql's horizon
        ]
        # sql/next_due.sql's guard: a row whose mark vouches for its enqueue and is not yet flushed (or a
        # standby missing) is not due; one otherwise due now is looked at again in the recheck interval.
        kept = {
            r.id: r
            for r in open_rows
            if guard is not None and r.guard_enqueued_at == r.enqueued_at and store.guard_keeps_back(r, guard)
        }
        kept_back = any(r.next_attempt_at <= now for r in kept.values())
        due = [r.next_attempt_at for r in open_rows if r.id not in kept]
        if kept_back:
            due.append(now + GUARD_RECHECK.ceiling(store.guard_waits + 1))
        store.guard_waits = store.guard_waits + 1 if kept_back else 0
        return min(due) - now if due else None

    async def arm(self, *, take_over: bool = False) -> Arming:
        store = self._store
        store._maybe_fail("arm")
        if store.armed and not take_over:
            return Arming.ALREADY
        if store.arm_refusals:
            store.arm_refusals -= 1
            return Arming.DEFERRED
        store.armed = True
        return Arming.ARMED

    async def look_ahead(self, *, arm: bool, take_over: bool = False) -> tuple[float | None, Arming | None]:
        self._store.looks += 1
        due = await self.next_due()
        if not arm:
            return due, None
        return due, Arming.ALREADY if self._store.armed and not take_over else Arming.NEEDED

    async def breaker_window(self) -> BreakerWindow:
        store = self._store
        since = store.clock() - BREAKER_WINDOW_SECONDS
        deletes: dict[str, int] = {}
        for at, namespace in store._deleted_at:
            if at > since:
                deletes[namespace] = deletes.get(namespace, 0) + 1
        return BreakerWindow(store.tripped, deletes, len(store.in_status(Status.CLAIMED)))

    async def breaker_tripped(self) -> str | None:
        return self._store.tripped

    async def trip_breaker(self, reason: str) -> None:
        self._store.trip(reason)  # sql/breaker_trip.sql: a tripped breaker keeps its first reason

    async def keep_back_transaction(self, at: datetime, rows: int, reason: str) -> int | None:
        """sql/large_transaction_keep.sql, for the transaction this session's claim found beginning ``at``."""
        store = self._store
        store._maybe_fail("keep_back_transaction")
        transaction = self._found[at]
        kept = store.transactions.keep(
            store.rows.values(), transaction, at=at.timestamp(), size=rows, reason=reason, who=store.replica
        )
        store.wrote()
        return kept

    async def hand_on(self, *, stopping: bool = False) -> None:
        self._store.handed_on += 1
