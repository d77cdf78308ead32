"""What the metrics refresher reads for the gauges and on-call: the lag view's one row, and each
cluster's gauges (every alert's per-cluster source)."""

from __future__ import annotations

from dataclasses import dataclass

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection


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
