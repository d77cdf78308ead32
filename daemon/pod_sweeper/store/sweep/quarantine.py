"""What the reconciliation pass reads and writes: its lease row, the suspects in quarantine, and the
outbox rows it enqueues. Small typed functions over ``sql/reconcile_*.sql``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection


@dataclass(frozen=True)
class Sighting:
    """A labelled pod no active row accounts for, as one pass saw it."""

    pod_uid: str
    pod_namespace: str
    pod_name: str
    sandbox_id: str
    generation: int
    attachment_id: int
    why: str  # retired, no_execution_row


async def begin(conn: Connection, *, replica: str, gap: float, lease: float, cluster: str) -> datetime | None:
    """Take the cluster's pass lease; the pass's start time, or None when it is not this replica's turn."""
    params = {"replica": replica, "gap": gap, "lease": lease, "cluster": cluster}
    cur = await conn.execute(queries.load("reconcile_begin"), params)
    row = await cur.fetchone()
    return None if row is None else row["started_at"]


async def sight(
    conn: Connection,
    sightings: list[Sighting],
    *,
    started_at: datetime,
    quarantine: float,
    cluster: str,
) -> set[str]:
    """Record the sightings; the UIDs whose quarantine is over (seen on an earlier pass, long enough ago)."""
    cur = await conn.execute(
        queries.load("reconcile_suspect"),
        {
            "uids": [s.pod_uid for s in sightings],
            "namespaces": [s.pod_namespace for s in sightings],
            "names": [s.pod_name for s in sightings],
            "sandbox_ids": [s.sandbox_id for s in sightings],
            "generations": [s.generation for s in sightings],
            "attachment_ids": [s.attachment_id for s in sightings],
            "whys": [s.why for s in sightings],
            "started_at": started_at,
            "quarantine": quarantine,
            "cluster": cluster,
        },
    )
    return {str(r["pod_uid"]) for r in await cur.fetchall() if r["due"]}


async def forget(conn: Connection, uids: list[str], *, cluster: str) -> None:
    """These pods of the cluster are no longer suspects (their generation came back, they changed,
    they went)."""
    await conn.execute(queries.load("reconcile_forget"), {"uids": uids, "cluster": cluster})


async def enqueue(conn: Connection, uids: list[str], *, cluster: str) -> int:
    """Enqueue the cluster's confirmed suspects as outbox rows with reason ``reconciled``; how many were
    enqueued."""
    params = {"uids": uids, "cluster": cluster}
    row = await (await conn.execute(queries.load("reconcile_enqueue"), params)).fetchone()
    return int(row["enqueued"]) if row else 0


async def prune(conn: Connection, *, started_at: datetime, cluster: str) -> None:
    """After a complete pass: forget the cluster's suspects it did not see."""
    await conn.execute(queries.load("reconcile_prune"), {"started_at": started_at, "cluster": cluster})


async def finish(
    conn: Connection,
    *,
    replica: str,
    started_at: datetime,
    seen: int,
    enqueued: int,
    error: str | None,
    cluster: str,
) -> int:
    """Record the pass and hand the lease back; the suspects in quarantine now."""
    cur = await conn.execute(
        queries.load("reconcile_finish"),
        {
            "seen": seen,
            "enqueued": enqueued,
            "error": error,
            "replica": replica,
            "started_at": started_at,
            "cluster": cluster,
        },
    )
    row = await cur.fetchone()
    return int(row["last_suspects"]) if row else 0
