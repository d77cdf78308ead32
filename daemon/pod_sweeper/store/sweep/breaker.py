"""The circuit breaker's row of each cluster: the window a claim reads (its row locked, so one replica
at a time spends the cluster's budget), whether it is tripped, the trip, and the reset an operator
makes. What trips it is decided in tasks/rules/surge.py and the claimer."""

from __future__ import annotations

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection
from pod_sweeper.store.rows import BreakerWindow


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
