"""What the confirmer reads and writes: deleted pods whose grace has passed, and what a fresh look at
each found. Small typed functions over ``sql/confirm_*.sql``, and ``TerminatingRows``, the two of them
as the confirmer asks for them (``PoolRows`` over the daemon's pool; the simulator's over its memory
store)."""

from __future__ import annotations

from typing import Protocol

from psycopg_pool import AsyncConnectionPool

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection
from pod_sweeper.store.rows import Terminating

__all__ = ["PoolRows", "Terminating", "TerminatingRows", "record", "take_due"]


async def take_due(conn: Connection, *, cluster: str, batch: int, recheck_seconds: float) -> list[Terminating]:
    """Up to ``batch`` of the cluster's rows due for a look, each put off by ``recheck_seconds`` (so no
    other replica looks at the same time)."""
    params = {"cluster": cluster, "batch": batch, "recheck_seconds": recheck_seconds}
    cur = await conn.execute(queries.load("confirm_claim"), params)
    return [
        Terminating(
            r["id"], r["pod_namespace"], r["pod_name"], str(r["pod_uid"]), r["done_at"], r["stuck_at"], r["age_seconds"]
        )
        for r in await cur.fetchall()
    ]


async def record(conn: Connection, *, cluster: str, ids: list[int], gone: list[bool], stuck: list[bool]) -> None:
    """What each look found: the pod gone (confirmed), or still there past the limit (stuck)."""
    params = {"cluster": cluster, "ids": ids, "gone": gone, "stuck": stuck}
    await conn.execute(queries.load("confirm_result"), params)


class TerminatingRows(Protocol):
    """The confirmer's two statements, each its own transaction: ``take_due`` and ``record`` above."""

    async def take_due(self, *, batch: int, recheck_seconds: float) -> list[Terminating]: ...

    async def record(self, *, ids: list[int], gone: list[bool], stuck: list[bool]) -> None: ...


class PoolRows:
    """``TerminatingRows`` over the daemon's pool, for one cluster."""

    def __init__(self, pool: AsyncConnectionPool[Connection], cluster: str) -> None:
        self.pool, self.cluster = pool, cluster

    async def take_due(self, *, batch: int, recheck_seconds: float) -> list[Terminating]:
        async with self.pool.connection() as conn:
            return await take_due(conn, cluster=self.cluster, batch=batch, recheck_seconds=recheck_seconds)

    async def record(self, *, ids: list[int], gone: list[bool], stuck: list[bool]) -> None:
        async with self.pool.connection() as conn:
            await record(conn, cluster=self.cluster, ids=ids, gone=gone, stuck=stuck)
