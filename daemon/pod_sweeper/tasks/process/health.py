"""The HTTP side of a running daemon: ``/metrics``, ``/livez`` and ``/readyz`` on one port, and the
timer that refreshes the database gauges.

The server runs on its own thread (a scrape or a probe must answer even while the event loop is busy)
and only reads state that the loop writes: a heartbeat time and a few flags. **The rule**: the loop
replaces each field of ``Health`` whole (a flag, a string, a read-only mapping, never one changed in
place), and the gates it calls keep theirs as frozen snapshots (tasks/rules/gates.py, "Threads"); a probe
reads each field once, so it may see two fields from two neighbouring moments (a reason one probe late),
never a field half written. ``/livez`` says the loop
is turning; ``/readyz`` says the daemon can do its job right now: database reachable, schema at the
expected version, listener healthy (or poll-only), start-up catch-up done, not stopping, and none of
the reasons rows wait whose rule says not ready (core.waits: the breaker, the API server unreachable or
refusing us, the schema gate, a start error). Each answers a short JSON reason.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
from loguru import logger
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import periodic
from pod_sweeper.core.errors import ConfigError, first_line
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.waits import ROW_ORDER, RULES, Seen, Wait, WaitLog, unready
from pod_sweeper.store.admin import controls
from pod_sweeper.store.db import Connection
from pod_sweeper.store.reads import replicas, waits
from pod_sweeper.store.sweep import gauges, outbox, rates

# The loop beats every second; livez fails after this many seconds without a beat.
LIVENESS_GRACE_SECONDS = 15.0
# The gauges of every open row (the lag view, each cluster's gauges and rates) read the claim index
# whole. While the xmin horizon has been held this long, every version the sweep has left since is in
# it, and those reads run only every HELD_REFRESH_SECONDS instead of at every refresh (docs/design.md,
# "A held xmin horizon"): the lag gauges then lag by up to that much, against a cost that grows with
# the hold, paid by every replica.
HELD_AFTER_SECONDS = 60.0
HELD_REFRESH_SECONDS = 60.0


def open_rows_due(held_seconds: float, since_last: float | None) -> bool:
    """Whether this refresh reads the gauges of every open row: always, unless the xmin horizon has
    been held ``HELD_AFTER_SECONDS`` or more and they were read less than ``HELD_REFRESH_SECONDS`` ago
    (``since_last`` None: never read)."""
    if since_last is None or held_seconds < HELD_AFTER_SECONDS:
        return True
    return since_last >= HELD_REFRESH_SECONDS


@dataclass
class Health:
    """State the loop writes and the probes read."""

    started: bool = False  # schema checked, LISTEN in place, first catch-up claim done
    stopping: bool = False
    database_ok: bool = False
    database_error: str | None = "not connected yet"
    schema_ok: bool = False
    schema_error: str | None = None  # why the schema watch found the schema one this replica may not run on
    # A start-up error a person must fix, while the replica waits (tasks.process.startup).
    start_error: str | None = None
    heartbeat: float = field(default_factory=time.monotonic)
    # Read from their owners at the moment a probe asks (see ``watch``), never copied on a timer.
    listener_ok: Callable[[], bool | None] = lambda: None  # None: poll-only mode
    gates: Callable[[], Mapping[Wait, str]] = lambda: {}  # the gates' reasons that hold now (core.waits)
    # What the gauge refresher last read of the database's reasons for this replica's cluster (a pause,
    # the replication guard's hold): written by the refresher, on the event loop.
    seen: Mapping[Wait, str] = field(default_factory=dict)

    def watch(self, *, listener_ok: Callable[[], bool | None], gates: Callable[[], Mapping[Wait, str]]) -> None:
        """Where readiness reads the listener's health and the gates' reasons (Kubernetes' refusal and
        reachability, the breaker, dry run) from."""
        self.listener_ok, self.gates = listener_ok, gates

    def waits(self) -> dict[Wait, str]:
        """Every reason (core.waits) this replica knows keeps rows now, with what its owner says: the
        one source of its readiness, its ``pod_sweeper_waiting`` gauge and its wait log lines."""
        active = {**self.seen, **self.gates()}
        if self.start_error:
            active[Wait.START_ERROR] = f"cannot start: {self.start_error}"
        if self.schema_error:
            active[Wait.SCHEMA] = f"not claiming: {self.schema_error}"
        return active

    def readiness(self) -> tuple[bool, str]:
        problems = []
        if self.stopping:
            problems.append("stopping")
        if not self.database_ok:
            problems.append(f"database: {self.database_error}")
        if not self.schema_error and not self.schema_ok:
            problems.append("schema not checked")
        if self.listener_ok() is False:
            problems.append("listener not hearing NOTIFY")
        problems += unready(self.waits())  # the reasons whose rule says not ready (docs/design.md)
        if not self.started:
            problems.append("starting")
        return (not problems, "; ".join(problems) or "ok")

    def liveness(self) -> tuple[bool, str]:
        age = time.monotonic() - self.heartbeat
        if age > LIVENESS_GRACE_SECONDS:
            return False, f"event loop stalled for {age:.0f} s"
        return True, "ok"


def _handler(health: Health, metrics: Metrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            """What GET would answer, headers only (load balancers and curl -I probe this way)."""
            self._head_only = True
            self.do_GET()

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            elif path in ("/livez", "/readyz"):
                ok, reason = health.liveness() if path == "/livez" else health.readiness()
                body = json.dumps({"status": "ok" if ok else "fail", "reason": reason}).encode()
                self._send(200 if ok else 503, body, "application/json")
            else:
                self._send(404, b'{"status": "fail", "reason": "no such path"}', "application/json")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not getattr(self, "_head_only", False):
                self.wfile.write(body)

    return Handler


class HealthServer:
    """``/metrics``, ``/livez``, ``/readyz`` on a thread of their own."""

    def __init__(self, host: str, port: int, health: Health, metrics: Metrics) -> None:
        try:
            self._server = ThreadingHTTPServer((host, port), _handler(health, metrics))
        except OSError as exc:
            # A port in use (or an address not on this host) is the operator's to fix, not a crash.
            raise ConfigError(
                f"cannot serve /metrics and the probes on {host}:{port} ({exc.strerror or exc}): "
                "free the port or set POD_SWEEPER_HTTP_PORT (0 turns the server off)"
            ) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


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


def _set_large_transactions(metrics: Metrics, clusters: set[str], held: list[dict[str, Any]]) -> None:
    """The large host transactions each cluster's rows wait in, and those rows (0 where none)."""
    for name in clusters | {t["cluster"] for t in held}:
        mine = [t for t in held if t["cluster"] == name]
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
    if standbys is not None and standbys.held_rows:
        seen[Wait.REPLICATION_GUARD] = (
            f"{standbys.held_rows} row(s), the oldest for {standbys.oldest_held_seconds:.0f} s; "
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


async def refresh_gauges(
    pool: AsyncConnectionPool[Connection],
    metrics: Metrics,
    health: Health,
    interval: float,
    cluster: str,
    guard: list[str] | None = None,
) -> None:
    """Every ``interval`` seconds, the database gauges (the reads of every open row less often while
    the xmin horizon is held: ``open_rows_due``); the refresh's success or failure is also the readiness
    probe's view of the database."""
    clusters_seen = {cluster}  # the replica's own cluster reads 0 from the first refresh
    holding_before: rates.XminHolder | None = None  # logged once when it starts, once when it ends
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
                held_for = max((h.seconds or 0.0 for h in xmin), default=0.0)
                now = time.monotonic()
                if open_rows_due(held_for, None if open_read_at is None else now - open_read_at):
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
                metrics.guard_holding.set(1 if standbys.held_rows else 0)
                metrics.guard_held_rows.set(standbys.held_rows)
                metrics.guard_oldest_held.set(standbys.oldest_held_seconds)
                metrics.guard_missing.set(standbys.missing)
                metrics.guard_lag.set(standbys.lag_bytes or 0)
                metrics.guard_lag_seconds.set(standbys.lag_seconds or 0)
            paused_series = set_paused(metrics, paused_series, in_force, cluster=cluster)
            held = sum(1 for c in in_force if c["cluster"] == cluster and c["kind"] == "hold")
            metrics.holds.labels(cluster).set(held)
            health.seen = _seen(in_force, standbys, cluster=cluster)
            for level, line in wait_log.update(_wait_lines(health.waits(), rows_waiting, cluster=cluster)):
                logger.log(level, "{line}", line=line)
            if by_cluster is not None and by_rate is not None:
                clusters_seen = _set_cluster_gauges(metrics, clusters_seen, by_cluster, by_rate)
            metrics.xmin_horizon_age.set(max((h.age_xids for h in xmin), default=0))
            metrics.xmin_horizon_seconds.set(held_for)
            holding = rates.holding_long(xmin)
            if holding is not None and holding_before is None:
                logger.warning(
                    "the database's xmin horizon is held by {holder}: vacuum can remove no row version "
                    "younger than it, so each claim and record costs more the longer it lasts (docs/dba.md, "
                    "'A held snapshot')",
                    holder=holding.describe(),
                )
            elif holding is None and holding_before is not None:
                logger.info("the database's xmin horizon is no longer held long")
            holding_before = holding
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
