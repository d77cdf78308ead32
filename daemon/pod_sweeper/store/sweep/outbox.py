"""The outbox's state transitions, each one short transaction: the claim (with the re-check), the record
of how rows ended (done, retry, dead, hand-back), and when the next row falls due; and the small reads
and signals of the daemon's tasks. What a row's round means is decided elsewhere (``tasks.rules.answers``,
handed to ``claim`` as its ``at_claim``): here it is only written, as the ``Verdict`` says. Every function
that touches one cluster's rows takes the cluster as a required keyword: none falls back to a default.

No transaction here outlives its statements: a claim commits before any API call is made, and every
record is fenced on (id, claim_epoch), so a replica that lost its lease changes nothing.

``OutboxStore`` (at the end) is the sweep pipeline's store (``store.interface.SweepStore``): these
functions on a pooled connection, bound to one cluster and one replica.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.states import Outcome, Result, Status
from pod_sweeper.store import queries
from pod_sweeper.store.cursor import START, ClaimCursor
from pod_sweeper.store.db import Connection
from pod_sweeper.store.recheck import Attachment, Recheck, recheck

if TYPE_CHECKING:  # the daemon's pool, named in OutboxStore's signature: a one-shot command never imports it
    from psycopg_pool import AsyncConnectionPool


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
    attachments: dict[int, Attachment]  # the attachments the re-check read the rows through

    @property
    def taken(self) -> int:
        """Rows this claim took, however each ended (a short count: nothing more is due now)."""
        return len(self.to_send) + len(self.decided)


# The daemon's claims leave a wakeup flag armed this recently as it is (sql/claim.sql): at most two
# writes of the flag's row every 10 s under steady churn, and retires NOTIFY for at most 10 s of a drain.
DISARM_AFTER_SECONDS = 10.0


class LargeTransaction(Exception):
    """A claim found rows of one host transaction at least the breaker's transaction rule allows
    (``size``: this claim's share and the rows still pending); the claim was rolled back."""

    def __init__(self, size: int) -> None:
        super().__init__(f"one host transaction retired at least {size} executions")
        self.size = size


# The reasons the host's own retires are enqueued with (not a backfill's or a reconciliation's).
HOST_REASONS = ("retired", "row_deleted")


# What the claim itself decides of a claimed row, given the re-check: its Verdict, or None to send it.
AtClaim = Callable[[Claim, Recheck], "Verdict | None"]


async def claim(
    conn: Connection,
    *,
    cluster: str,
    owner: str,
    batch: int,
    lease_seconds: float,
    attachments: dict[int, Attachment],
    disarm: bool,
    at_claim: AtClaim,
    guard: list[str] | None = None,
    floor: datetime = START,
    transaction_rows: int = 0,
    disarm_after: float = 0.0,
) -> ClaimedBatch:
    """Claim up to ``batch`` due rows of ``cluster`` (each one's attempt charged, its epoch bumped), re-check them, and
    record the rows ``at_claim`` ends at once (a generation active again, a re-check that could not be made, a lease
    that expired once too often), all in one short transaction. The claim also clears the wakeup flag (see
    :func:`arm`), except with ``disarm=False`` (the claim right after arming) or when it was armed less than
    ``disarm_after`` seconds ago. With ``guard`` (the standbys the replication guard names), only rows whose enqueue
    every one of them has flushed (:func:`guard_mark` first). Reads the claim index from ``floor`` up
    (store/cursor.py). With ``transaction_rows``, raises :class:`LargeTransaction` (and claims nothing) when the
    rows of one host transaction it took and those still pending come to that many."""
    async with conn.transaction():
        cur = await conn.execute(
            queries.load("claim"),
            {
                "owner": owner,
                "batch": batch,
                "lease_seconds": lease_seconds,
                "disarm": disarm,
                "cluster": cluster,
                "guard": guard,
                "floor": floor,
                "disarm_after": disarm_after,
            },
        )
        rows = await cur.fetchall()
        if transaction_rows:
            await _transaction_rule(conn, rows, cluster, transaction_rows, batch)
        claims = [
            Claim(
                r["id"],
                r["claim_epoch"],
                r["attachment_id"],
                r["sandbox_id"],
                r["generation"],
                r["pod_namespace"],
                r["pod_name"],
                r["pod_uid"],
                r["attempts"],
                r["reason"],
                r["held_by"] if r["was"] == Status.CLAIMED else None,
            )
            for r in rows
        ]
        if not claims:
            return ClaimedBatch([], [], attachments)
        checked = await recheck(conn, claims, attachments)
        decided = [(c, verdict) for c in claims if (verdict := at_claim(c, checked)) is not None]
        if decided:
            await record_results(conn, [verdict for _, verdict in decided], owner, cluster=cluster)
        ended = {c.id for c, _ in decided}
        return ClaimedBatch([c for c in claims if c.id not in ended], decided, checked.attachments)


async def _transaction_rule(
    conn: Connection, rows: list[dict[str, object]], cluster: str, limit: int, batch: int
) -> None:
    """The breaker's transaction rule, in the claim's transaction and before anything is sent: a host
    transaction's rows share their enqueued_at (its start), and while pending their due time too, so
    its rows still pending are counted on the claim index by that one key (at most ``limit`` of them),
    not by reading every open row. Looked at only for a key this claim took two or more rows of (any,
    for a claim of one row): one row a transaction, steady churn's shape, costs nothing."""
    shares = Counter(r["enqueued_at"] for r in rows if r["reason"] in HOST_REASONS and r["was"] == Status.PENDING)
    keys = [at for at, n in shares.items() if n >= min(2, batch)]
    if not keys:
        return
    cur = await conn.execute(queries.load("breaker_transaction"), {"cluster": cluster, "keys": keys, "limit": limit})
    for r in await cur.fetchall():
        if (size := shares[r["at"]] + int(r["pending"])) >= limit:
            raise LargeTransaction(size)


async def guard_mark(conn: Connection, *, cluster: str) -> int:
    """The replication guard's mark of the cluster's open rows whose enqueue no mark vouches for yet
    (migration 0014); how many were marked."""
    return (await conn.execute(queries.load("guard_mark"), {"cluster": cluster})).rowcount


@dataclass(frozen=True)
class GuardLag:
    """What the replication guard sees of the standbys it names, and what it holds of a cluster's rows."""

    connected: int
    missing: int  # named standbys not connected: while any is, every row is held
    lag_bytes: float | None  # the slowest connected one's flush; None: none connected, or unreadable
    lag_seconds: float | None  # its flush_lag as the primary measures it
    held_rows: int  # open rows whose mark is current but not flushed on every named standby
    oldest_held_seconds: float  # since the retire of the oldest of them (0: none)


async def guard_lag(conn: Connection, standbys: list[str], *, cluster: str) -> GuardLag:
    row = await (await conn.execute(queries.load("guard_lag"), {"standbys": standbys, "cluster": cluster})).fetchone()
    assert row is not None  # aggregates: always one row
    return GuardLag(
        int(row["connected"]),
        int(row["missing"]),
        row["lag_bytes"],
        row["lag_seconds"],
        int(row["held_rows"]),
        float(row["oldest_held_seconds"]),
    )


async def record_results(conn: Connection, verdicts: list[Verdict], replica: str, *, cluster: str) -> set[int]:
    """Record ``verdicts`` (and their attempts) in one statement; returns the ids this replica still owned
    (the rest were taken over after a lease expiry and are left as the other replica recorded them)."""
    if not verdicts:
        return set()
    rows = [
        {
            "id": f.id,
            "epoch": f.epoch,
            "status": f.status,
            "outcome": f.outcome,
            "result": f.result,
            "delay": f.delay,
            "error": f.error,
            "http_status": f.http_status,
            "refund": 0 if f.charged else 1,
            "started": f.attempt.started_at.isoformat() if f.attempt else None,
            "duration_ms": f.attempt.duration_ms if f.attempt else None,
            "reason": f.attempt.reason if f.attempt else None,
            "confirm_in": f.confirm_in,
        }
        for f in verdicts
    ]
    params = {"replica": replica, "cluster": cluster, "rows": json.dumps(rows), "ids": [f.id for f in verdicts]}
    cur = await conn.execute(queries.load("record_results"), params)
    return {r["id"] for r in await cur.fetchall()}


# While the replication guard holds rows, how soon the claimer looks again whether a standby has caught
# up: from the first, doubling while it still holds, to the last (a standby's position has no NOTIFY).
# The first is the normal case's (a standby a few ms behind the mark made just before the claim).
GUARD_RECHECK_MIN_SECONDS = 0.05
GUARD_RECHECK_MAX_SECONDS = 5.0
GUARD_RECHECK = Backoff(GUARD_RECHECK_MIN_SECONDS, GUARD_RECHECK_MAX_SECONDS)  # its ceiling: no jitter


@dataclass(frozen=True)
class Due:
    """What the next-due read found: seconds until the next claim may take a row (negative: due now;
    None: nothing open within the horizon), and whether the replication guard holds rows that are
    otherwise due (then ``seconds`` is at most the recheck interval it was given)."""

    seconds: float | None
    guard_holds: bool = False


async def next_due(
    conn: Connection,
    *,
    cluster: str,
    cursor: ClaimCursor | None = None,
    horizon: float = 86_400.0,
    guard: list[str] | None = None,
    recheck: float = GUARD_RECHECK_MAX_SECONDS,
) -> Due:
    """When the cluster's next open row becomes claimable, within ``horizon`` seconds. With ``cursor``,
    read from where its claim read (store/cursor.py), and move its floor up. With ``guard``, a row the
    replication guard holds is due again in ``recheck`` seconds, not now."""
    floor = cursor.due_from() if cursor is not None else START
    params = {"cluster": cluster, "floor": floor, "horizon": horizon, "guard": guard, "recheck": recheck}
    row = await (await conn.execute(queries.load("next_due"), params)).fetchone()
    if row is None:
        return Due(None)
    if cursor is not None:
        cursor.looked(row["low"], row["now"])
    return Due(None if row["seconds"] is None else float(row["seconds"]), bool(row["held"]))


async def arm(conn: Connection, owner: str, *, cluster: str) -> bool:
    """Ask retires to NOTIFY again, before sleeping; False while an enqueue that may have read the flag
    clear is still open (then poll again soon instead of sleeping). After True, claim once more
    (``disarm=False``) before sleeping: rows committed before the arming are not announced."""
    cur = await conn.execute(queries.load("arm"), {"key": queries.Lock.WAKEUP, "owner": owner, "cluster": cluster})
    return await cur.fetchone() is not None


async def prune_batch(conn: Connection, *, retention_seconds: float, batch: int) -> int | None:
    """Delete one batch of expired done rows; None when another replica holds the prune lock."""
    async with conn.transaction():
        cur = await conn.execute(queries.load("try_advisory_lock"), {"key": queries.Lock.PRUNE})
        row = await cur.fetchone()
        if not (row and row["mine"]):
            return None
        cur = await conn.execute(queries.load("prune"), {"retention": f"{retention_seconds} seconds", "batch": batch})
        return cur.rowcount


async def prune(conn: Connection, *, retention_seconds: float, batch: int = 1000) -> int | None:
    """Batches until no expired done row is left (``pod-sweeper prune``); the number deleted, None if
    another replica prunes. (The daemon's pass takes a connection per batch: see tasks/process/runner.py.)"""
    total = 0
    while True:
        deleted = await prune_batch(conn, retention_seconds=retention_seconds, batch=batch)
        if deleted is None:
            return None if total == 0 else total
        total += deleted
        if deleted < batch:
            return total


@dataclass(frozen=True)
class BreakerWindow:
    """One cluster's breaker as the claim reads it (its row locked for the claim's transaction)."""

    tripped_reason: str | None  # None: closed
    deletes: dict[str, int]  # per namespace, since the later of a minute ago and the last resume
    claimed: int  # rows any replica holds right now: deletes that may still happen

    @property
    def total(self) -> int:
        return sum(self.deletes.values())


async def breaker_window(conn: Connection, cluster: str) -> BreakerWindow:
    """Inside a transaction: read the cluster's breaker and lock its row until the transaction ends, so
    that one replica at a time spends the cluster's budget. The lock first, in a statement of its own:
    the window's read then takes its snapshot after the lock was granted, so it sees every claim the
    replica that held the lock committed (one statement read them as of before its wait)."""
    await conn.execute(queries.load("breaker_lock"), {"cluster": cluster})
    rows = await (await conn.execute(queries.load("breaker_window"), {"cluster": cluster})).fetchall()
    tripped = rows[0]["reason"] or "tripped" if rows and rows[0]["tripped_at"] else None
    claimed = int(rows[0]["claimed"]) if rows else 0
    return BreakerWindow(tripped, {r["pod_namespace"]: r["deletes"] for r in rows if r["pod_namespace"]}, claimed)


async def breaker_tripped(conn: Connection, cluster: str) -> str | None:
    """Why the cluster's breaker is tripped (None: it is not): one row by its key, no lock, no count."""
    row = await (await conn.execute(queries.load("breaker_state"), {"cluster": cluster})).fetchone()
    return None if row is None else row["tripped_reason"]


async def trip_breaker(conn: Connection, cluster: str, reason: str, who: str) -> None:
    await conn.execute(queries.load("breaker_trip"), {"cluster": cluster, "reason": reason, "who": who})


async def reset_breakers(conn: Connection, *, cluster: str, all_clusters: bool, who: str) -> dict[str, bool]:
    """Close the breaker of ``cluster`` (or of every tripped one); each breaker touched -> whether it
    had been tripped."""
    params = {"cluster": cluster, "all_clusters": all_clusters, "who": who}
    rows = await (await conn.execute(queries.load("breaker_reset"), params)).fetchall()
    return {r["cluster"]: r["was_tripped_at"] is not None for r in rows}


async def record_outage(conn: Connection, *, cluster: str, replica: str, reason: str, closed_for: float) -> None:
    """This replica cannot reach its API server (since ``closed_for`` seconds ago)."""
    params = {"cluster": cluster, "replica": replica, "reason": reason, "closed_for": closed_for}
    await conn.execute(queries.load("outage_record"), params)


async def clear_outage(conn: Connection, *, cluster: str, replica: str) -> None:
    """This replica's API server answers."""
    await conn.execute(queries.load("outage_clear"), {"cluster": cluster, "replica": replica})


async def prune_outages(conn: Connection) -> int:
    """Outage reports an hour stale (their replica died mid-outage); how many were deleted."""
    return (await conn.execute(queries.load("outage_prune"))).rowcount


# --- signals and small reads of the daemon's tasks ----------------------------------------------------


async def notify(conn: Connection, payload: str = "", *, cluster: str) -> None:
    """NOTIFY the cluster's channel: wakes its listening sweepers (``payload`` tells a listener's own ping)."""
    await conn.execute(queries.load("notify"), queries.notify_params(payload, cluster=cluster))


async def listen(conn: Connection, *, cluster: str) -> None:
    """LISTEN on the cluster's channel (this connection must then stay this session's: not through a pooler)."""
    await conn.execute(queries.listen(cluster=cluster))


async def cluster_rows(conn: Connection, *, cluster: str, owner: str) -> None:
    """The cluster's wakeup flag, reconciliation lease and breaker rows, made once by its first replica."""
    await conn.execute(queries.load("cluster_rows"), {"cluster": cluster, "owner": owner})


async def reopen_dry_run(conn: Connection, *, cluster: str, keep: list[str]) -> int:
    """At the start of a real run: the cluster's dry-run would_delete rows back to pending, except those
    of the namespaces still swept in dry run (``keep``); how many."""
    return (await conn.execute(queries.load("reopen_dry_run"), {"cluster": cluster, "keep": keep})).rowcount


@dataclass(frozen=True)
class Lag:
    """The lag view's one row: what the gauges and on-call read."""

    pending: int
    claimed: int
    dead: int
    backoff: int
    oldest_claimable_seconds: float
    oldest_backoff_seconds: float
    oldest_claim_seconds: float
    rejected: int  # retires recorded in pod_sweeper.rejects (nothing enqueued)


async def lag(conn: Connection) -> Lag | None:
    row = await (await conn.execute(queries.load("status_lag"))).fetchone()
    if row is None:
        return None
    return Lag(
        row["pending"],
        row["claimed"],
        row["dead"],
        row["backoff"],
        row["oldest_claimable_seconds"],
        row["oldest_backoff_seconds"],
        row["oldest_claim_seconds"],
        row["rejected"],
    )


@dataclass(frozen=True)
class ClusterGauges:
    """One cluster's gauges (``sql/cluster_gauges.sql``); all 0 for a cluster with nothing to show."""

    cluster: str
    pending: int = 0
    oldest_claimable_seconds: float = 0.0
    oldest_claim_seconds: float = 0.0
    dead: int = 0
    rejected: int = 0


async def cluster_gauges(conn: Connection) -> list[ClusterGauges]:
    """Every cluster's gauges, each alert's per-cluster source."""
    rows = await (await conn.execute(queries.load("cluster_gauges"))).fetchall()
    return [
        ClusterGauges(
            r["cluster"],
            r["pending"],
            r["oldest_claimable_seconds"],
            r["oldest_claim_seconds"],
            r["dead"],
            r["rejected"],
        )
        for r in rows
    ]


async def namespaces(conn: Connection, *, cluster: str) -> list[str]:
    """The namespaces of the cluster's open rows and of its rows done in the last hour (at most 50), for
    ``check``."""
    rows = await (await conn.execute(queries.load("check_namespaces"), {"cluster": cluster})).fetchall()
    return [r["pod_namespace"] for r in rows]


# --- the sweep pipeline's store (store.interface.SweepStore), on PostgreSQL ---------------------------


class OutboxSession:
    """The functions above, on one pooled connection, for one cluster and one replica."""

    def __init__(self, conn: Connection, store: OutboxStore) -> None:
        self._conn, self._store = conn, store
        self._cluster, self._owner = store.cluster, store.replica

    def transaction(self) -> AbstractAsyncContextManager[object]:
        return self._conn.transaction()

    async def claim(
        self,
        *,
        batch: int,
        lease_seconds: float,
        disarm: bool,
        at_claim: AtClaim,
        guard: list[str] | None,
        transaction_rows: int = 0,
    ) -> ClaimedBatch:
        cursor = self._store.cursor
        claimed = await claim(
            self._conn,
            cluster=self._cluster,
            owner=self._owner,
            batch=batch,
            lease_seconds=lease_seconds,
            attachments=self._store.attachments,
            disarm=disarm,
            at_claim=at_claim,
            guard=guard,
            floor=cursor.claim_from(),
            transaction_rows=transaction_rows,
            disarm_after=DISARM_AFTER_SECONDS,
        )
        cursor.claimed(claimed.taken, batch)
        if claimed.taken:
            self._store.guard_waits = 0
        self._store.attachments = claimed.attachments  # what the re-check read the rows through
        return claimed

    async def guard_mark(self) -> int:
        return await guard_mark(self._conn, cluster=self._cluster)

    async def record_results(self, verdicts: list[Verdict]) -> set[int]:
        return await record_results(self._conn, verdicts, self._owner, cluster=self._cluster)

    async def next_due(self) -> float | None:
        store = self._store
        due = await next_due(
            self._conn,
            cluster=self._cluster,
            cursor=store.cursor,
            horizon=store.due_horizon,
            guard=store.guard,
            recheck=GUARD_RECHECK.ceiling(store.guard_waits + 1),
        )
        store.guard_waits = store.guard_waits + 1 if due.guard_holds else 0
        return due.seconds

    async def arm(self) -> bool:
        return await arm(self._conn, self._owner, cluster=self._cluster)

    async def breaker_window(self) -> BreakerWindow:
        return await breaker_window(self._conn, self._cluster)

    async def breaker_tripped(self) -> str | None:
        return await breaker_tripped(self._conn, self._cluster)

    async def trip_breaker(self, reason: str) -> None:
        await trip_breaker(self._conn, self._cluster, reason, self._owner)

    async def notify(self) -> None:
        await notify(self._conn, cluster=self._cluster)


class OutboxStore:
    """The outbox in PostgreSQL for one replica of one cluster: a session per pooled connection. It keeps
    the attachments the last claim's re-check read rows through (the start-up's, until a row names one
    it did not have), and where its claims read the claim index from (store/cursor.py). ``due_horizon``:
    how far ahead ``next_due`` looks (the caller's longest sleep, its poll interval); ``guard``: the
    standbys the replication guard names, whose held rows ``next_due`` does not count as due."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        *,
        cluster: str,
        replica: str,
        attachments: dict[int, Attachment],
        due_horizon: float = 86_400.0,
        guard: list[str] | None = None,
    ) -> None:
        self.pool, self.cluster, self.replica, self.attachments = pool, cluster, replica, attachments
        self.cursor = ClaimCursor()
        self.due_horizon = due_horizon
        self.guard = guard
        self.guard_waits = 0  # next-due reads in a row the guard held rows at: GUARD_RECHECK's attempt

    def rediscover_in(self) -> float | None:
        return self.cursor.discovery_in()

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[OutboxSession]:
        async with self.pool.connection() as conn:
            yield OutboxSession(conn, self)
