"""Retention: done rows older than the retention deleted in batches, one replica at a time (the prune
advisory lock), by the daemon's side loop and by ``pod-sweeper prune``."""

from __future__ import annotations

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection


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
    another replica prunes. (The daemon's pass takes a connection per batch: see tasks/loops/retention.py.)"""
    total = 0
    while True:
        deleted = await prune_batch(conn, retention_seconds=retention_seconds, batch=batch)
        if deleted is None:
            return None if total == 0 else total
        total += deleted
        if deleted < batch:
            return total
