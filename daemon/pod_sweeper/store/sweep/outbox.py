"""The outbox's state transitions on the sweep's hot path, each one short transaction: the claim (with
the re-check and the breaker's transaction rule), the record of how rows ended (done, retry, dead,
hand-back), when the next row falls due, the wakeup flag, and the replication guard's mark. What a
row's round means is decided elsewhere (``tasks.rules.verdicts``, handed to ``claim`` as its
``at_claim``): here it is only written, as the ``Verdict`` says. Every function that touches one
cluster's rows takes the cluster as a required keyword: none falls back to a default.

No transaction here outlives its statements: a claim commits before any API call is made, and every
record is fenced on (id, claim_epoch), so a replica that lost its lease changes nothing.
``store.sweep.pgstore.OutboxStore`` binds these to one cluster and replica on the pool."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from psycopg.pq import TransactionStatus

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.states import Status
from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection
from pod_sweeper.store.rows import Arming, AtClaim, AttachedTable, Claim, ClaimedBatch, LargeTransaction, Verdict
from pod_sweeper.store.sweep.cursor import START, ClaimCursor
from pod_sweeper.store.sweep.recheck import recheck

# The daemon's claims leave a wakeup flag armed this recently as it is (sql/claim.sql): at most two
# writes of the flag's row every 10 s under steady churn, and retires NOTIFY for at most 10 s of a drain.
DISARM_AFTER_SECONDS = 10.0


# The reasons the host's own retires are enqueued with (not a backfill's or a reconciliation's).
HOST_REASONS = ("retired", "row_deleted")


async def claim(
    conn: Connection,
    *,
    cluster: str,
    owner: str,
    batch: int,
    lease_seconds: float,
    attachments: Mapping[int, AttachedTable],
    disarm: bool,
    at_claim: AtClaim,
    guard: list[str] | None = None,
    floor: datetime = START,
    transaction_rows: int = 0,
    disarm_after: float = 0.0,
    contain: bool = True,
    gathering: bool = False,
) -> ClaimedBatch:
    """Claim up to ``batch`` due rows of ``cluster`` (each one's attempt charged, its epoch bumped), re-check them,
    and record the rows ``at_claim`` ends at once (a generation active again, a re-check that could not be made, a
    lease that expired once too often), all in one short transaction. The claim also clears the wakeup flag (see
    :func:`arm`), except with ``disarm=False`` (the claim right after arming) or when it was armed less than
    ``disarm_after`` seconds ago; a claim that takes fewer than ``batch`` clears it only ``gathering`` (its replica
    claims again after a pause whatever comes: POD_SWEEPER_GATHER_SECONDS), whenever it takes a row. With ``guard``
    (the standbys the replication guard names), only rows whose enqueue every one of them has flushed
    (:func:`guard_mark` first). Reads the claim index from ``floor`` up (store/sweep/cursor.py). With
    ``transaction_rows``, raises :class:`LargeTransaction` (and claims nothing) when the rows of one host
    transaction it took and those still pending come to that many. ``contain``: each host table's re-check in a
    savepoint of its own (``recheck.recheck``)."""
    async with _atomic(conn):
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
                "transaction_rows": transaction_rows,
                "gathering": gathering,
            },
        )
        rows = await cur.fetchall()
        if transaction_rows:
            await _transaction_rule(conn, rows, cluster, transaction_rows)
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
        checked = await recheck(conn, claims, attachments, contain=contain)
        decided = [(c, verdict) for c in claims if (verdict := at_claim(c, checked)) is not None]
        if decided:
            await record_results(conn, [verdict for _, verdict in decided], owner, cluster=cluster)
        ended = {c.id for c, _ in decided}
        return ClaimedBatch([c for c in claims if c.id not in ended], decided, checked.attachments)


def _atomic(conn: Connection) -> AbstractAsyncContextManager[object]:
    """A transaction for what must commit together, or the caller's own when one is open already (the
    claimer's turn): a savepoint there would be two more statements a turn for nothing."""
    if conn.info.transaction_status == TransactionStatus.INTRANS:
        return contextlib.nullcontext()
    return conn.transaction()


async def _transaction_rule(conn: Connection, rows: list[dict[str, object]], cluster: str, limit: int) -> None:
    """The breaker's transaction rule, in the claim's transaction and before anything is sent: a host
    transaction's rows share their enqueued_at (its start), and while pending their due time too, so
    its rows still pending are counted on the claim index by that one key (at most ``limit`` of them),
    not by reading every open row. Every key the claim took is looked at, however few of its rows: the
    claim may take one row of a large transaction beside others while the rest wait behind the batch's
    end, a pause, a hold or the replication guard, and that row would go out unjudged, the rest one short
    of the threshold ever after (the simulator found both). The claim statement's first look (its
    ``transaction_rows`` column: the transaction's pending rows as it began, its own among them, counted
    once per transaction) leaves only the keys that reach the threshold there to count here, so steady
    churn's one-row transactions cost one equality each inside the claim and no statement more."""
    suspects = {
        cast(datetime, r["enqueued_at"]) for r in rows if isinstance(n := r["transaction_rows"], int) and n >= limit
    }
    if not suspects:
        return
    shares = Counter(
        cast(datetime, r["enqueued_at"]) for r in rows if r["reason"] in HOST_REASONS and r["was"] == Status.PENDING
    )
    params = {"cluster": cluster, "keys": sorted(suspects), "limit": limit}
    cur = await conn.execute(queries.load("breaker_transaction"), params)
    for r in await cur.fetchall():
        if (size := shares[r["at"]] + int(r["pending"])) >= limit:
            raise LargeTransaction(size, r["at"])


async def keep_back_transaction(
    conn: Connection, *, cluster: str, at: datetime, rows: int, reason: str, who: str
) -> int | None:
    """Keep the rows of the host transaction that began ``at`` back as one batch (migration 0020), with
    its audit row; the id it was given, or None when another replica recorded it first."""
    params = {"cluster": cluster, "at": at, "rows": rows, "reason": reason, "who": who}
    row = await (await conn.execute(queries.load("large_transaction_keep"), params)).fetchone()
    return None if row is None else int(row["id"])


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
    kept_back_rows: int  # open rows whose mark is current but not flushed on every named standby
    oldest_kept_back_seconds: float  # since the retire of the oldest of them (0: none)


async def guard_lag(conn: Connection, standbys: list[str], *, cluster: str) -> GuardLag:
    row = await (await conn.execute(queries.load("guard_lag"), {"standbys": standbys, "cluster": cluster})).fetchone()
    assert row is not None  # aggregates: always one row
    return GuardLag(
        int(row["connected"]),
        int(row["missing"]),
        row["lag_bytes"],
        row["lag_seconds"],
        int(row["kept_back_rows"]),
        float(row["oldest_kept_back_seconds"]),
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
    guard_keeps_back: bool = False
    flag_armed: bool | None = None  # the wakeup flag (None: its row is missing)
    flag_by: str | None = None  # the replica it names (migration 0018)


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
    read from where its claim read (store/sweep/cursor.py), and move its floor up. With ``guard``, a row the
    replication guard holds is due again in ``recheck`` seconds, not now."""
    floor = cursor.due_from() if cursor is not None else START
    params = {"cluster": cluster, "floor": floor, "horizon": horizon, "guard": guard, "recheck": recheck}
    row = await (await conn.execute(queries.load("next_due"), params)).fetchone()
    if row is None:
        return Due(None)
    if cursor is not None:
        cursor.looked(row["low"], row["now"])
    seconds = None if row["seconds"] is None else float(row["seconds"])
    return Due(seconds, bool(row["kept_back"]), row["flag_armed"], row["flag_by"])


async def arm(conn: Connection, owner: str, *, cluster: str, take_over: bool = False) -> Arming:
    """Ask retires to NOTIFY again, naming this replica, before sleeping. ``DEFERRED`` while an enqueue
    that may have read the flag clear is still open (then poll again soon instead of sleeping). After
    ``ARMED``, claim once more (``disarm=False``) before sleeping: rows committed before the arming were
    not announced to this replica. ``ALREADY``: armed before, sleep. With ``take_over``, a flag naming
    another replica is made this one's (its wakeups went unclaimed: sql/arm.sql)."""
    params = {"key": queries.Lock.WAKEUP, "owner": owner, "cluster": cluster, "take_over": take_over}
    row = await (await conn.execute(queries.load("arm"), params)).fetchone()
    if row is None:
        return Arming.DEFERRED
    return Arming.ARMED if row["newly"] else Arming.ALREADY


async def cluster_rows(conn: Connection, *, cluster: str) -> None:
    """The cluster's wakeup flag, reconciliation lease and breaker rows, made once by its first replica."""
    await conn.execute(queries.load("cluster_rows"), {"cluster": cluster})


async def reopen_dry_run(conn: Connection, *, cluster: str, keep: list[str]) -> int:
    """At the start of a real run: the cluster's dry-run would_delete rows back to pending, except those
    of the namespaces still swept in dry run (``keep``); how many."""
    return (await conn.execute(queries.load("reopen_dry_run"), {"cluster": cluster, "keep": keep})).rowcount
