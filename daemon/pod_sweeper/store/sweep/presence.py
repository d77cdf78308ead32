"""A replica's row in ``pod_sweeper.replicas`` (migration 0019): what its heartbeat writes and what its
clean stop marks. The row is how the database knows who sweeps, and what every surface reads a
replica's fate-changing settings from (store/reads/replicas.py), so that ``explain`` and ``status``
answer the same from any shell."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection

# A row this long past its replica's last heartbeat (or its clean stop) is deleted by any heartbeat.
FORGET_AFTER_SECONDS = 3600.0


@dataclass(frozen=True)
class Beat:
    """What one heartbeat says of its replica."""

    replica: str
    host: str
    release: str
    schema_version: int  # the newest migration its release knows
    cluster: str
    namespaces: tuple[str, ...] | None  # None: every namespace
    dry_run: bool
    dry_run_namespaces: tuple[str, ...] | None
    guard: tuple[str, ...] | None  # the replication guard's standbys; None: off
    rate_limit: float
    concurrency: int
    ready: bool
    waits: Mapping[str, str]  # a core.waits.Wait value -> what its owner says
    heartbeat_seconds: float
    up_for: float  # seconds since the process started


async def beat(conn: Connection, b: Beat) -> None:
    """Write this replica's row whole (and delete the rows of replicas an hour gone)."""
    params = {
        "replica": b.replica,
        "host": b.host,
        "release": b.release,
        "schema_version": b.schema_version,
        "cluster": b.cluster,
        "namespaces": list(b.namespaces) if b.namespaces is not None else None,
        "dry_run": b.dry_run,
        "dry_run_namespaces": list(b.dry_run_namespaces) if b.dry_run_namespaces else None,
        "guard": list(b.guard) if b.guard else None,
        "rate_limit": b.rate_limit,
        "concurrency": b.concurrency,
        "ready": b.ready,
        "waits": json.dumps(dict(b.waits), sort_keys=True),
        "heartbeat_seconds": b.heartbeat_seconds,
        "up_for": b.up_for,
        "forget_after": FORGET_AFTER_SECONDS,
    }
    await conn.execute(queries.load("replica_beat"), params)


async def stopped(conn: Connection, *, replica: str, cluster: str) -> None:
    """This replica stopped cleanly: its row says so now rather than going stale."""
    await conn.execute(queries.load("replica_stop"), {"replica": replica, "cluster": cluster})
