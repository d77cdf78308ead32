"""The metrics refresher, a side loop of every replica: every GAUGE_REFRESH_SECONDS (tasks/process/runner.py)
one read-only transaction reads the database's gauges (the lag, each cluster's gauges and rates, why
open rows wait, who sweeps, the large transactions kept back, the xmin horizon, the pauses and holds,
the replication guard's view) and sets them; tells the replica what it read of its own cluster (a
pause, the guard's hold) and whether the database answered (readiness's view of it); and logs when a
reason rows wait starts and ends (``core.waits.WaitLog``). While the xmin horizon is pinned, the reads of
every open row run less often (``open_rows_due``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import periodic
from pod_sweeper.core.errors import first_line
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.waits import ROW_ORDER, RULES, Seen, Wait, WaitLog
from pod_sweeper.store.admin import controls
from pod_sweeper.store.db import Connection
from pod_sweeper.store.reads import replicas, waits
from pod_sweeper.store.sweep import gauges, outbox, rates

# The gauges of every open row (the lag view, each cluster's gauges and rates) read the claim index
# whole. While the xmin horizon has been pinned this long, every version the sweep has left since is in
# it, and those reads run only every PINNED_REFRESH_SECONDS instead of at every refresh (docs/design.md,
# "A pinned xmin horizon"): the lag gauges then lag by up to that much, against a cost that grows with
# the horizon's age, paid by every replica.
PINNED_AFTER_SECONDS = 60.0
PINNED_REFRESH_SECONDS = 60.0


def open_rows_due(pinned_seconds: float, since_last: float | None) -> bool:
    """Whether this refresh reads the gauges of every open row: always, unless the xmin horizon has
    been pinned ``PINNED_AFTER_SECONDS`` or more and they were read less than ``PINNED_REFRESH_SECONDS`` ago
    (``since_last`` None: never read)."""
    if since_last is None or pinned_seconds < PINNED_AFTER_SECONDS:
        return True
    return since_last >= PINNED_REFRESH_SECONDS


def _set_cluster_gauges(
    metrics: Metrics,
    clusters_seen: set[str],
    by_cluster: list[gauges.ClusterGauges],
    by_rate: dict[str, rates.ClusterRates],
) -> set[str]:
    """Each cluster's gauges as read; a cluster with nothing left to show reads 0 (not the last value
    it had). Returns every cluster seen so far."""
    current = {c.cluster: c for c in by_cluster}
    for name in clusters_seen | set(current):
        row = current.get(name, gauges.ClusterGauges(name))
        metrics.cluster_lag.labels(name).set(row.oldest_claimable_seconds)
        metrics.cluster_pending.labels(name).set(row.pending)
        metrics.cluster_dead.labels(name).set(row.dead)
        metrics.cluster_oldest_claim.labels(name).set(row.oldest_claim_seconds)
        metrics.cluster_rejected.labels(name).set(row.rejected)
        rate = by_rate.get(name, rates.ClusterRates(name))
        metrics.cluster_arrival_rate.labels(name).set(rate.arrival_rate)
        metrics.cluster_sweep_rate.labels(name).set(rate.sweep_rate)
    return clusters_seen | set(current) | set(by_rate)


def _set_waiting_rows(metrics: Metrics, clusters: set[str], rows: list[waits.Waiting]) -> None:
    """``pod_sweeper_waiting_rows``: every row reason of every cluster seen, 0 where it keeps none."""
    counts = {(w.cluster, w.reason): w.rows for w in rows}
    for name in clusters | {w.cluster for w in rows}:
        for wait in ROW_ORDER:
            metrics.waiting_rows.labels(name, wait.value).set(counts.get((name, wait.value), 0))


def _set_sweepers(metrics: Metrics, clusters: set[str], sweepers: list[replicas.Sweepers]) -> None:
    """Who sweeps each cluster: its live replicas, and 1 while it has open rows and none (every cluster
    seen reads 0 rather than nothing, so a rule can tell "none" from "not scraped")."""
    current = {w.cluster: w for w in sweepers}
    for name in clusters | set(current):
        row = current.get(name, replicas.Sweepers(name, 0, 0.0, 0, 0, ()))
        metrics.cluster_live_replicas.labels(name).set(row.live_replicas)
        metrics.cluster_no_live_replica.labels(name).set(1 if row.unswept else 0)


def _set_large_transactions(metrics: Metrics, clusters: set[str], kept: list[dict[str, Any]]) -> None:
    """The large host transactions each cluster's rows wait in, and those rows (0 where none)."""
    for name in clusters | {t["cluster"] for t in kept}:
        mine = [t for t in kept if t["cluster"] == name]
        metrics.cluster_large_transactions.labels(name).set(len(mine))
        metrics.cluster_large_transaction_rows.labels(name).set(sum(t["open_rows"] for t in mine))


def _seen(in_force: list[dict[str, Any]], standbys: outbox.GuardLag | None, *, cluster: str) -> dict[Wait, str]:
    """The reasons the refresher reads for this replica's cluster: a pause in force, the guard's hold."""
    seen: dict[Wait, str] = {}
    pauses = [c for c in in_force if c["cluster"] == cluster and c["kind"] == "pause"]
    if pauses:
        seen[Wait.PAUSED] = "; ".join(
            f"{c['pod_namespace'] or 'the whole cluster'} by {c['actor']} until {c['until']:%Y-%m-%d %H:%M:%S}"
            for c in pauses
        )
    if standbys is not None and standbys.kept_back_rows:
        seen[Wait.REPLICATION_GUARD] = (
            f"{standbys.kept_back_rows} row(s), the oldest for {standbys.oldest_kept_back_seconds:.0f} s; "
            f"{standbys.missing} named standby(s) missing"
        )
    return seen


def _wait_lines(replica: Mapping[Wait, str], rows: list[waits.Waiting], *, cluster: str) -> dict[tuple[Wait, str], str]:
    """What ``WaitLog`` follows: the replica's reasons, the reasons only rows show (a hold) of its own
    cluster, and any cluster's unswept rows (no replica of that cluster is there to say so: every other
    replica does). A reason the replica sees itself is logged from its own view alone, which is the one
    its gauge and readiness follow (the database's view of it may come a moment sooner or later)."""
    lines = {(wait, "this replica"): detail for wait, detail in replica.items()}
    for w in rows:
        wait = Wait(w.reason)
        if RULES[wait].seen is Seen.ROW and (w.cluster == cluster or wait is Wait.UNSWEPT):
            lines[(wait, f"cluster {w.cluster}")] = f"{w.rows} row(s), the oldest enqueued {w.oldest_seconds:.0f} s ago"
    return lines


def set_paused(
    metrics: Metrics, exported: set[tuple[str, str]], in_force: list[dict[str, Any]], *, cluster: str
) -> set[tuple[str, str]]:
    """``pod_sweeper_paused_seconds``: the pauses of this replica's cluster as they are now; returns the
    series exported. The rule: a pause in force is set before anything is removed, and only a pause that
    ended is removed, so a scrape (the HTTP thread reads the gauge whenever it likes) never sees a pause
    in force missing. Cleared first and set again, a scrape in between saw no pause at all."""
    now: set[tuple[str, str]] = set()
    for control in in_force:
        if control["cluster"] == cluster and control["kind"] == "pause":
            labels = (cluster, control["pod_namespace"] or "*")
            metrics.paused.labels(*labels).set((control["now"] - control["since"]).total_seconds())
            now.add(labels)
    for labels in exported - now:
        metrics.paused.remove(*labels)
    return now


class ReplicaView(Protocol):
    """What the refresher tells the replica and asks of it (``tasks.process.health.Health`` is one): the
    reasons it read in the database for this replica's cluster, whether the database answered, and
    every reason the replica knows now (for the wait log)."""

    seen: Mapping[Wait, str]
    database_ok: bool
    database_error: str | None

    def waits(self) -> dict[Wait, str]: ...


async def refresh_gauges(
    pool: AsyncConnectionPool[Connection],
    metrics: Metrics,
    health: ReplicaView,
    interval: float,
    cluster: str,
    guard: list[str] | None = None,
) -> None:
    """Every ``interval`` seconds, the database gauges (the reads of every open row less often while
    the xmin horizon is pinned: ``open_rows_due``); the refresh's success or failure is also the readiness
    probe's view of the database."""
    clusters_seen = {cluster}  # the replica's own cluster reads 0 from the first refresh
    pinning_before: rates.XminHolder | None = None  # logged once when it starts, once when it ends
    open_read_at: float | None = None  # when the gauges of every open row were last read
    wait_log = WaitLog()
    rows_waiting: list[waits.Waiting] = []  # as last read with the open rows
    paused_series: set[tuple[str, str]] = set()  # the pod_sweeper_paused_seconds series exported
    while True:
        try:
            # One transaction for the refresh's reads: one commit on the primary every interval rather
            # than one a read (six, idle, were a third of what an idle replica cost it: bench ``cost``).
            async with pool.connection(timeout=max(1.0, interval)) as conn, conn.transaction():
                xmin = await rates.xmin_holders(conn)
                pinned_for = max((h.seconds or 0.0 for h in xmin), default=0.0)
                now = time.monotonic()
                if open_rows_due(pinned_for, None if open_read_at is None else now - open_read_at):
                    open_read_at = now
                    lag = await gauges.lag(conn)
                    by_cluster = await gauges.cluster_gauges(conn)
                    by_rate = {r.cluster: r for r in await rates.cluster_rates(conn)}
                    rows_waiting = await waits.by_cluster(conn)
                    _set_waiting_rows(metrics, clusters_seen | {c.cluster for c in by_cluster}, rows_waiting)
                    sweepers = await replicas.sweepers(conn)
                    _set_sweepers(metrics, clusters_seen, sweepers)
                    _set_large_transactions(metrics, clusters_seen, await controls.large_transactions(conn))
                else:  # the gauges keep their values; the rest is read as always
                    lag, by_cluster, by_rate = None, None, None
                in_force = await controls.in_force(conn)
                standbys = await outbox.guard_lag(conn, guard, cluster=cluster) if guard else None
            if standbys is not None:
                metrics.guard_keeping_back.set(1 if standbys.kept_back_rows else 0)
                metrics.guard_kept_back_rows.set(standbys.kept_back_rows)
                metrics.guard_oldest_kept_back.set(standbys.oldest_kept_back_seconds)
                metrics.guard_missing.set(standbys.missing)
                metrics.guard_lag.set(standbys.lag_bytes or 0)
                metrics.guard_lag_seconds.set(standbys.lag_seconds or 0)
            paused_series = set_paused(metrics, paused_series, in_force, cluster=cluster)
            holds = sum(1 for c in in_force if c["cluster"] == cluster and c["kind"] == "hold")
            metrics.holds.labels(cluster).set(holds)
            health.seen = _seen(in_force, standbys, cluster=cluster)
            for level, line in wait_log.update(_wait_lines(health.waits(), rows_waiting, cluster=cluster)):
                logger.log(level, "{line}", line=line)
            if by_cluster is not None and by_rate is not None:
                clusters_seen = _set_cluster_gauges(metrics, clusters_seen, by_cluster, by_rate)
            metrics.xmin_horizon_age.set(max((h.age_xids for h in xmin), default=0))
            metrics.xmin_horizon_seconds.set(pinned_for)
            pinning = rates.pinned_long(xmin)
            if pinning is not None and pinning_before is None:
                logger.warning(
                    "the database's xmin horizon is pinned by {holder}: vacuum can remove no row version "
                    "younger than it, so each claim and record costs more the longer it lasts (docs/dba.md, "
                    "'A snapshot kept open')",
                    holder=pinning.describe(),
                )
            elif pinning is None and pinning_before is not None:
                logger.info("the database's xmin horizon is no longer pinned long")
            pinning_before = pinning
            if lag is not None:
                for status, rows in (("pending", lag.pending), ("claimed", lag.claimed), ("dead", lag.dead)):
                    metrics.outbox_rows.labels(status).set(rows)
                metrics.lag.set(lag.oldest_claimable_seconds)
                metrics.backoff_rows.set(lag.backoff)
                metrics.oldest_backoff.set(lag.oldest_backoff_seconds)
                metrics.dead_rows.set(lag.dead)
                metrics.oldest_claim.set(lag.oldest_claim_seconds)
                metrics.rejected.set(lag.rejected)
                metrics.gauges_refreshed.set_to_current_time()
            health.database_ok, health.database_error = True, None
        except psycopg.Error as exc:  # PoolTimeout included
            if health.database_ok:
                logger.warning("database unreachable: {error}", error=first_line(exc))
            health.database_ok = False
            health.database_error = first_line(exc)
        await periodic.pause(interval)
