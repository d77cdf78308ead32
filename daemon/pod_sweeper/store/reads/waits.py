"""The database's view of why rows wait (``sql/row_waits.sql``, the reasons of ``core.waits``): one
reason per open row for ``explain``, and the rows each reason keeps per cluster for ``status`` and
the metrics refresher. Both read the same statement, so they cannot disagree; and the settings that
decide a row's fate (the replication guard) come from the replicas' own rows (pod_sweeper.replicas),
never from the reader's, so they answer the same from any shell."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from pod_sweeper.core.waits import DUE, UNSWEPT_AFTER_SECONDS
from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection


@dataclass(frozen=True)
class Waiting:
    """The open rows of one cluster that one reason keeps."""

    cluster: str
    reason: str  # a core.waits.Wait value
    rows: int
    oldest_seconds: float  # since the oldest one's enqueue


def _params(*, cluster: str | None = None, ids: Sequence[int] | None = None) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "ids": list(ids) if ids is not None else None,
        "unswept_after": UNSWEPT_AFTER_SECONDS,
    }


async def row_reasons(conn: Connection, ids: Sequence[int]) -> dict[int, str]:
    """Each open row of ``ids`` to its reason (``core.waits.DUE``: nothing keeps it)."""
    if not ids:
        return {}
    cur = await conn.execute(queries.load("row_waits"), _params(ids=ids))
    return {row["id"]: row["reason"] for row in await cur.fetchall()}


async def by_cluster(conn: Connection, *, cluster: str | None = None) -> list[Waiting]:
    """The rows each reason keeps, per cluster (of ``cluster`` alone when given), rows nothing keeps left
    out."""
    statement = sql.SQL(
        "SELECT cluster, reason, count(*) AS rows, max(waited_seconds) AS oldest_seconds FROM ({}) AS w"
        " WHERE reason <> {} GROUP BY cluster, reason ORDER BY cluster, reason"
    ).format(queries.load("row_waits"), sql.Literal(DUE))
    cur = await conn.execute(statement, _params(cluster=cluster))
    return [Waiting(r["cluster"], r["reason"], r["rows"], r["oldest_seconds"]) for r in await cur.fetchall()]
