"""The outbox's state transitions, each one short transaction: claim (with the re-check), finalize
(done, retry, dead, hand-back), and when the next row falls due.

No transaction here outlives its statements: a claim commits before any API call is made, and every
finalize is fenced on (id, claim_epoch), so a replica that lost its lease changes nothing.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from pod_sweeper.core.outcome import Outcome
from pod_sweeper.core.settings import DEFAULT_CLUSTER
from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection
from pod_sweeper.store.recheck import Attachment, recheck


@dataclass(frozen=True)
class Claim:
    """A claimed row: what the sweeper needs to act on it and to finalize it."""

    id: int
    epoch: int
    attachment_id: int
    sandbox_id: str
    generation: int
    pod_namespace: str
    pod_name: str
    pod_uid: UUID
    attempts: int
    reason: str


@dataclass(frozen=True)
class Attempt:
    """One request to the API server: when, how long, and the answer's reason."""

    started_at: datetime
    duration_ms: float
    reason: str | None


@dataclass(frozen=True)
class Final:
    """How one claimed row ends this round."""

    id: int
    epoch: int
    status: str  # done, pending, dead
    outcome: str | None = None
    delay: float = 0.0
    error: str | None = None
    http_status: int | None = None
    refund: int = 0
    attempt: Attempt | None = None  # the request behind this result, for the attempt history
    confirm_in: float | None = None  # seconds until the terminating pod is looked at again

    @classmethod
    def done(
        cls, claim: Claim, outcome: Outcome, http_status: int | None = None, attempt: Attempt | None = None
    ) -> Final:
        return cls(claim.id, claim.epoch, "done", outcome.value, http_status=http_status, attempt=attempt)

    @classmethod
    def retry(
        cls, claim: Claim, delay: float, error: str, http_status: int | None = None, attempt: Attempt | None = None
    ) -> Final:
        return cls(claim.id, claim.epoch, "pending", delay=delay, error=error, http_status=http_status, attempt=attempt)

    @classmethod
    def dead(cls, claim: Claim, error: str, http_status: int | None = None, attempt: Attempt | None = None) -> Final:
        return cls(claim.id, claim.epoch, "dead", error=error, http_status=http_status, attempt=attempt)

    @classmethod
    def hand_back(
        cls,
        claim: Claim,
        error: str | None = None,
        delay: float = 0.0,
        http_status: int | None = None,
        attempt: Attempt | None = None,
    ) -> Final:
        """Back to pending without charging the attempt (shutdown, or a fault of the daemon)."""
        return cls(
            claim.id,
            claim.epoch,
            "pending",
            delay=delay,
            error=error,
            http_status=http_status,
            refund=1,
            attempt=attempt,
        )


@dataclass
class ClaimResult:
    to_delete: list[Claim]
    skipped: int  # finalized skipped_active in the claim transaction
    unknown: int  # re-check could not tell; put back for a retry
    expired_dead: int  # leases that expired with their attempts used up

    @property
    def taken(self) -> int:
        """Rows this claim took, however each ended (a short count: nothing more is due now)."""
        return len(self.to_delete) + self.skipped + self.unknown + self.expired_dead


async def claim(
    conn: Connection,
    *,
    owner: str,
    batch: int,
    lease_seconds: float,
    max_attempts: int,
    attachments: dict[int, Attachment],
    recheck_retry_delay: float,
    disarm: bool = True,
    cluster: str = DEFAULT_CLUSTER,
) -> ClaimResult:
    """Claim up to ``batch`` rows and re-check them, all in one short transaction. The claim also
    clears the wakeup flag (see :func:`arm`), except with ``disarm=False``: the claim right after arming."""
    async with conn.transaction():
        cur = await conn.execute(
            queries.load("claim"),
            {
                "owner": owner,
                "batch": batch,
                "lease_seconds": lease_seconds,
                "max_attempts": max_attempts,
                "disarm": disarm,
                "cluster": cluster,
            },
        )
        rows = await cur.fetchall()
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
            )
            for r in rows
            if r["status"] == "claimed"
        ]
        expired_dead = len(rows) - len(claims)
        if not claims:
            return ClaimResult([], 0, 0, expired_dead)
        verdict = await recheck(conn, claims, attachments)
        finals = [Final.done(c, Outcome.SKIPPED_ACTIVE) for c in claims if c.id in verdict.active]
        finals += [
            Final.dead(c, verdict.unknown[c.id])
            if c.attempts >= max_attempts
            else Final.retry(c, recheck_retry_delay, verdict.unknown[c.id])
            for c in claims
            if c.id in verdict.unknown
        ]
        if finals:
            await _finalize(conn, finals, owner)
        to_delete = [c for c in claims if c.id not in verdict.active and c.id not in verdict.unknown]
        return ClaimResult(to_delete, len(verdict.active), len(verdict.unknown), expired_dead)


async def _finalize(conn: Connection, finals: list[Final], replica: str) -> set[int]:
    rows = [
        {
            "id": f.id,
            "epoch": f.epoch,
            "status": f.status,
            "outcome": f.outcome,
            "delay": f.delay,
            "error": f.error,
            "http_status": f.http_status,
            "refund": f.refund,
            "started": f.attempt.started_at.isoformat() if f.attempt else None,
            "duration_ms": f.attempt.duration_ms if f.attempt else None,
            "reason": f.attempt.reason if f.attempt else None,
            "confirm_in": f.confirm_in,
        }
        for f in finals
    ]
    cur = await conn.execute(queries.load("finalize"), {"replica": replica, "rows": json.dumps(rows)})
    return {r["id"] for r in await cur.fetchall()}


async def finalize(conn: Connection, finals: list[Final], replica: str) -> set[int]:
    """Record ``finals`` (and their attempts) in one statement; returns the ids this replica still owned
    (the rest were taken over after a lease expiry and are left as the other replica recorded them)."""
    if not finals:
        return set()
    return await _finalize(conn, finals, replica)


async def next_due(conn: Connection, cluster: str = DEFAULT_CLUSTER) -> float | None:
    """Seconds until the cluster's next open row becomes claimable (negative: already due); None: none."""
    row = await (await conn.execute(queries.load("next_due"), {"cluster": cluster})).fetchone()
    return None if row is None or row["seconds"] is None else float(row["seconds"])


async def arm(conn: Connection, owner: str, cluster: str = DEFAULT_CLUSTER) -> bool:
    """Ask retires to NOTIFY again, before sleeping; False while an enqueue that may have read the flag
    clear is still open (then poll again soon instead of sleeping). After True, claim once more
    (``disarm=False``) before sleeping: rows committed before the arming are not announced."""
    cur = await conn.execute(queries.load("arm"), {"key": queries.Lock.WAKEUP, "owner": owner, "cluster": cluster})
    return await cur.fetchone() is not None


async def reopen(conn: Connection, *, ids: list[int], all_dead: bool, who: str) -> list[int]:
    """Back to pending with attempts reset (``pod-sweeper retry``); returns the ids reopened."""
    cur = await conn.execute(queries.load("retry"), {"ids": ids, "all_dead": all_dead, "who": who})
    return sorted(r["id"] for r in await cur.fetchall())


async def prune_batch(conn: Connection, *, retention_seconds: float, batch: int) -> int | None:
    """Delete one batch of expired done rows; None when another replica holds the prune lock."""
    async with conn.transaction():
        cur = await conn.execute(queries.load("try_advisory_lock"), {"key": queries.Lock.PRUNE})
        row = await cur.fetchone()
        if not (row and row["mine"]):
            return None
        cur = await conn.execute(queries.load("prune"), {"retention": f"{retention_seconds} seconds", "batch": batch})
        return cur.rowcount


async def prune(conn: Connection, *, retention_seconds: float, batch: int = 1000, pause: float = 0.0) -> int | None:
    """Batches until no expired done row is left; the number deleted, None if another replica prunes.
    ``pause`` seconds between batches let other transactions through (the daemon's pass)."""
    total = 0
    while True:
        deleted = await prune_batch(conn, retention_seconds=retention_seconds, batch=batch)
        if deleted is None:
            return None if total == 0 else total
        total += deleted
        if deleted < batch:
            return total
        if pause:
            await asyncio.sleep(pause)


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
    that one replica at a time spends the cluster's budget."""
    rows = await (await conn.execute(queries.load("breaker_window"), {"cluster": cluster})).fetchall()
    tripped = rows[0]["reason"] or "tripped" if rows and rows[0]["tripped_at"] else None
    claimed = int(rows[0]["claimed"]) if rows else 0
    return BreakerWindow(tripped, {r["pod_namespace"]: r["deletes"] for r in rows if r["pod_namespace"]}, claimed)


async def trip_breaker(conn: Connection, cluster: str, reason: str, who: str) -> None:
    await conn.execute(queries.load("breaker_trip"), {"cluster": cluster, "reason": reason, "who": who})


async def resume_breakers(conn: Connection, *, cluster: str, all_clusters: bool, who: str) -> dict[str, bool]:
    """Close the breaker of ``cluster`` (or of every tripped one); each breaker touched -> whether it
    had been tripped."""
    params = {"cluster": cluster, "all_clusters": all_clusters, "who": who}
    rows = await (await conn.execute(queries.load("breaker_resume"), params)).fetchall()
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


async def notify(conn: Connection, payload: str = "", cluster: str = DEFAULT_CLUSTER) -> None:
    """NOTIFY the cluster's channel: wakes its listening sweepers (``payload`` tells a listener's own ping)."""
    await conn.execute(queries.load("notify"), queries.notify_params(payload, cluster))


async def listen(conn: Connection, cluster: str = DEFAULT_CLUSTER) -> None:
    """LISTEN on the cluster's channel (this connection must then stay this session's: not through a pooler)."""
    await conn.execute(queries.listen(cluster))


async def cluster_rows(conn: Connection, cluster: str, owner: str) -> None:
    """The cluster's wakeup flag, reconciliation lease and breaker rows, made once by its first replica."""
    await conn.execute(queries.load("cluster_rows"), {"cluster": cluster, "owner": owner})


async def reopen_dry_run(conn: Connection) -> int:
    """Rows a dry run left as would_delete, back to pending for a real run; how many."""
    return (await conn.execute(queries.load("reopen_dry_run"))).rowcount


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
class ClusterLag:
    """One cluster's open rows (the lag_by_cluster view)."""

    cluster: str
    pending: int
    oldest_claimable_seconds: float


async def lag_by_cluster(conn: Connection) -> list[ClusterLag]:
    rows = await (await conn.execute(queries.load("status_clusters"))).fetchall()
    return [ClusterLag(r["cluster"], r["pending"], r["oldest_claimable_seconds"]) for r in rows]


async def namespaces(conn: Connection) -> list[str]:
    """The namespaces the outbox names (at most 50), for ``check``."""
    return [r["pod_namespace"] for r in await (await conn.execute(queries.load("check_namespaces"))).fetchall()]
