"""What the confirmer reads and writes: deleted pods whose grace has passed, and what a fresh look at
each found. Small typed functions over ``sql/confirm_*.sql``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection


@dataclass(frozen=True)
class Terminating:
    """A row whose DELETE left the pod terminating, due for a look."""

    id: int
    pod_namespace: str
    pod_name: str
    pod_uid: str
    done_at: datetime
    stuck_at: datetime | None


async def take_due(conn: Connection, *, cluster: str, batch: int, recheck_seconds: float) -> list[Terminating]:
    """Up to ``batch`` of the cluster's rows due for a look, each put off by ``recheck_seconds`` (so no
    other replica looks at the same time)."""
    params = {"cluster": cluster, "batch": batch, "recheck_seconds": recheck_seconds}
    cur = await conn.execute(queries.load("confirm_claim"), params)
    return [
        Terminating(r["id"], r["pod_namespace"], r["pod_name"], str(r["pod_uid"]), r["done_at"], r["stuck_at"])
        for r in await cur.fetchall()
    ]


async def record(conn: Connection, *, cluster: str, ids: list[int], gone: list[bool], stuck: list[bool]) -> None:
    """What each look found: the pod gone (confirmed), or still there past the limit (stuck)."""
    params = {"cluster": cluster, "ids": ids, "gone": gone, "stuck": stuck}
    await conn.execute(queries.load("confirm_result"), params)
