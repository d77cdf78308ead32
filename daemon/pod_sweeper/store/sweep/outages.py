"""The outage rows: each replica that cannot reach its API server says so in the database (for
``status`` and the alerts), clears it when the server answers, and stale reports are pruned."""

from __future__ import annotations

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection


async def report_outage(conn: Connection, *, cluster: str, replica: str, reason: str, closed_for: float) -> None:
    """This replica cannot reach its API server (since ``closed_for`` seconds ago)."""
    params = {"cluster": cluster, "replica": replica, "reason": reason, "closed_for": closed_for}
    await conn.execute(queries.load("outage_report"), params)


async def clear_outage(conn: Connection, *, cluster: str, replica: str) -> None:
    """This replica's API server answers."""
    await conn.execute(queries.load("outage_clear"), {"cluster": cluster, "replica": replica})


async def prune_outages(conn: Connection) -> int:
    """Outage reports an hour stale (their replica died mid-outage); how many were deleted."""
    return (await conn.execute(queries.load("outage_prune"))).rowcount
