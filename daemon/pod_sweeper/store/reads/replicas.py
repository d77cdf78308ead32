"""Who sweeps: the replicas as their heartbeats last wrote them (``pod_sweeper.replicas``, migration
0019), and each cluster's open rows beside its live replicas. ``status``, ``explain`` and the metrics
refresher read a replica's fate-changing settings (the replication guard, dry run) from here, never from
their own reader's settings, so that an on-call's shell with the database URL alone hears what a replica
would say. Where the live replicas of a cluster disagree (a rolling change of the guard or of dry run),
``disagreements`` says on what, and the surfaces list them replica by replica."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection

LIVE = "live"


@dataclass(frozen=True)
class Replica:
    """One replica's row (``sql/status_replicas.sql``)."""

    replica: str
    host: str
    release: str
    schema_version: int
    cluster: str
    namespaces: tuple[str, ...] | None  # None: every namespace
    dry_run: bool
    dry_run_namespaces: tuple[str, ...]
    guard: tuple[str, ...] | None  # None: the replication guard is off
    rate_limit: float
    concurrency: int
    ready: bool
    waits: Mapping[str, str]  # a core.waits.Wait value -> what the replica says of it
    heartbeat_seconds: float
    started_at: dt.datetime
    seen_at: dt.datetime
    stopped_at: dt.datetime | None
    state: str  # live, stale or stopped (pod_sweeper.replica_state)
    seen_seconds_ago: float

    @property
    def live(self) -> bool:
        return self.state == LIVE

    def dry_run_in(self, namespace: str) -> bool:
        """Whether this replica would only record, not delete, a pod of ``namespace``."""
        return self.dry_run or namespace in self.dry_run_namespaces

    def settings(self) -> dict[str, str]:
        """The settings that decide a row's fate, as words, for comparing replicas and for people."""
        return {
            "replication guard": ", ".join(self.guard) if self.guard else "off",
            "dry run": "every namespace"
            if self.dry_run
            else (", ".join(self.dry_run_namespaces) if self.dry_run_namespaces else "off"),
            "namespaces": ", ".join(self.namespaces) if self.namespaces is not None else "every one",
        }


@dataclass(frozen=True)
class Sweepers:
    """Who sweeps one cluster (``sql/status_sweepers.sql``)."""

    cluster: str
    open_rows: int
    oldest_open_seconds: float
    live_replicas: int
    ready_replicas: int
    unseen: tuple[str, ...]  # replicas at work there that keep no row: an older release's

    @property
    def unswept(self) -> bool:
        """Open rows, no live replica known and none seen at work: nothing sweeps this cluster."""
        return self.open_rows > 0 and self.live_replicas == 0 and not self.unseen


def _replica(r: Mapping[str, Any]) -> Replica:
    return Replica(
        replica=r["replica"],
        host=r["host"],
        release=r["release"],
        schema_version=r["schema_version"],
        cluster=r["cluster"],
        namespaces=tuple(r["namespaces"]) if r["namespaces"] is not None else None,
        dry_run=r["dry_run"],
        dry_run_namespaces=tuple(r["dry_run_namespaces"] or ()),
        guard=tuple(r["guard"]) if r["guard"] else None,
        rate_limit=r["rate_limit"],
        concurrency=r["concurrency"],
        ready=r["ready"],
        waits=dict(r["waits"] or {}),
        heartbeat_seconds=r["heartbeat_seconds"],
        started_at=r["started_at"],
        seen_at=r["seen_at"],
        stopped_at=r["stopped_at"],
        state=r["state"],
        seen_seconds_ago=r["seen_seconds_ago"],
    )


async def known(conn: Connection) -> list[Replica]:
    """Every replica the table keeps (those that ran in the last hour), by cluster and id."""
    return [_replica(r) for r in await (await conn.execute(queries.load("status_replicas"))).fetchall()]


async def sweepers(conn: Connection) -> list[Sweepers]:
    """Who sweeps each cluster; a cluster with open rows and no live replica first."""
    rows = await (await conn.execute(queries.load("status_sweepers"))).fetchall()
    return [
        Sweepers(
            r["cluster"],
            r["open_rows"],
            r["oldest_open_seconds"],
            r["live_replicas"],
            r["ready_replicas"],
            tuple(r["unseen"]),
        )
        for r in rows
    ]


def deciding(replicas: Iterable[Replica], cluster: str) -> list[Replica]:
    """The replicas whose settings decide the fate of ``cluster``'s rows: its live ones, or where none
    is live, the last the table keeps of it (the rule of ``sql/row_waits.sql``)."""
    mine = [r for r in replicas if r.cluster == cluster]
    return [r for r in mine if r.live] or mine


def disagreements(replicas: Iterable[Replica]) -> dict[str, list[str]]:
    """Per cluster, the settings (by name, ``Replica.settings``) on which its live replicas differ: a
    rolling change of the guard or of dry run."""
    by_cluster: dict[str, list[Replica]] = {}
    for r in replicas:
        if r.live:
            by_cluster.setdefault(r.cluster, []).append(r)
    found: dict[str, list[str]] = {}
    for cluster, live in by_cluster.items():
        differ = [name for name in live[0].settings() if len({r.settings()[name] for r in live}) > 1]
        if differ:
            found[cluster] = differ
    return found
