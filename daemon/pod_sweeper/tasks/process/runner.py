"""The ``run`` process: start-up, the named long-lived tasks, signals and the shutdown deadline.

Start-up order matters for readiness: Kubernetes configuration first (a bad kubeconfig is a
configuration error, exit 2), then the database, retried with backoff for as long as it takes (a
sidecar must not crash-loop while its database restarts; one log line per attempt), then the schema
check (exit 3 if it does not match), then the LISTEN, then the first catch-up claim; only after that is
the process ready.

The tasks (listener, the outage watch, sweeper with its claimer, workers and recorder, retention,
confirmer, the reconciler when it is configured, the gauges, the heartbeat and the shutdown watcher) run in
one task group: if any of them dies, the others are cancelled and the process exits 1 with a line
naming the task. SIGTERM or SIGINT starts a graceful stop (no new claims, in-flight deletes get
``shutdown_timeout`` seconds, unfinished claims are handed back without charging an attempt, exit 0); a
second signal exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from loguru import logger
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from pod_sweeper.core import failpoints
from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.errors import EXIT_FAILURE, EXIT_OK, DatabaseUnavailable
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.core.waits import Wait
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import load_configuration
from pod_sweeper.kube.scope import NamespaceScope
from pod_sweeper.store import db
from pod_sweeper.store.schema import migrations
from pod_sweeper.store.sweep import outbox
from pod_sweeper.store.sweep.pgstore import OutboxStore
from pod_sweeper.store.sweep.recheck import Attachment, load_attachments
from pod_sweeper.tasks.loops.confirmer import Confirmer
from pod_sweeper.tasks.loops.listener import Listener
from pod_sweeper.tasks.loops.outage import OutageWatch
from pod_sweeper.tasks.loops.presence import Presence
from pod_sweeper.tasks.loops.reconciler import Reconciler
from pod_sweeper.tasks.loops.refresher import refresh_gauges
from pod_sweeper.tasks.loops.retention import Retention
from pod_sweeper.tasks.loops.schema_watch import SchemaWatch, count_attached
from pod_sweeper.tasks.loops.surge import SurgeWatch
from pod_sweeper.tasks.process.health import Health, HealthServer
from pod_sweeper.tasks.process.sdnotify import Notifier
from pod_sweeper.tasks.process.startup import StartGate
from pod_sweeper.tasks.rules.gates import BreakerGate, SchemaGate
from pod_sweeper.tasks.rules.surge import SurgeRules
from pod_sweeper.tasks.sweep.stop import Phase
from pod_sweeper.tasks.sweep.sweeper import Sweeper

GAUGE_REFRESH_SECONDS = 5.0
# The systemd watchdog calls the claimer wedged once its loop has stood still for STALL_WAITS of its
# longest ordinary waits (a poll, a request) and STALL_MARGIN_SECONDS more.
STALL_WAITS = 2
STALL_MARGIN_SECONDS = 10.0
# HTTP connections to the API server beyond one per worker: the Events task, the outage probe, the
# confirmer and the reconciliation pass each send from a thread of their own.
KUBE_CONNECTIONS_BESIDE_THE_WORKERS = 4


class _Stop(Exception):
    """Raised by the shutdown watcher to end the task group once the drain is done."""


@dataclass
class _Opened:
    """What the start-up opened so far, for ``Daemon.run`` to close on the way out."""

    kube: KubeClient | None = None
    pool: AsyncConnectionPool[db.Connection] | None = None


@dataclass(frozen=True)
class _Started:
    """What a finished start-up hands the wiring."""

    pool: AsyncConnectionPool[db.Connection]
    kube: KubeClient
    version: int  # the schema's
    attachments: dict[int, Attachment]


@dataclass(frozen=True)
class _Wired:
    """The pipeline and the parts the task group needs besides it."""

    started: _Started
    sweeper: Sweeper
    listener: Listener | None
    outage: OutageWatch
    schema: SchemaGate
    breaker: BreakerGate


async def _named(name: str, coro: Coroutine[Any, Any, None]) -> None:
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except _Stop:
        raise
    except Exception as exc:
        logger.opt(exception=exc).critical("task {task} died, stopping the process: {error}", task=name, error=exc)
        raise


class Daemon:
    def __init__(self, settings: Settings, *, handle_signals: bool = True) -> None:
        self.settings = settings
        self.handle_signals = handle_signals  # off when embedded (tests, the demo) off the main thread
        self.stop_requested = asyncio.Event()
        self.metrics = Metrics(listening=settings.listens, cluster=settings.cluster)
        self.health = Health()
        self.metrics.ready.set_function(lambda: 1.0 if self.ready else 0.0)
        for wait in Wait:  # every reason exported, 1 while it holds (read from Health.waits when scraped)
            self.metrics.waiting.labels(wait.value).set_function(functools.partial(self._waiting, wait))
        if settings.listens:  # not ready until the listener hears (it is replaced by the listener's own)
            self.health.listener_ok = lambda: False
        self.notifier = Notifier()
        self.http: HealthServer | None = None
        self.sweeper: Sweeper | None = None
        self.listener: Listener | None = None
        self.outage: OutageWatch | None = None
        self.surge_watch: SurgeWatch | None = None
        self.presence: Presence | None = None
        self._signals = 0

    @property
    def ready(self) -> bool:
        return self.health.readiness()[0]

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals > 1:
            logger.warning("second {sig}: exiting at once", sig=signal.Signals(signum).name)
            os._exit(EXIT_FAILURE)
        logger.info(
            "{sig}: stopping; in-flight deletes get {s:g} s",
            sig=signal.Signals(signum).name,
            s=self.settings.shutdown_timeout,
        )
        self.stop_requested.set()

    async def _open_pool(self) -> AsyncConnectionPool[db.Connection] | None:
        """The daemon's pool, open; retried with backoff until it works, or None once a stop is
        requested (nothing is left open then: a pool that failed to open is closed, and the next
        attempt makes a new one, since a closed pool cannot be opened again).

        Each attempt first opens one plain connection: its failure carries the server's reason (no such
        role, a wrong password, connection refused), which a pool's timeout does not, and the pool is
        opened only once that works, so its own reconnect warnings do not repeat the same story."""
        backoff = Backoff.for_reconnects(self.settings.backoff_base, self.settings.backoff_max)
        attempt = 0
        while not self.stop_requested.is_set():
            attempt += 1
            pool: AsyncConnectionPool[db.Connection] | None = None
            try:
                probe = await db.connect(self.settings)
                await probe.close()
                pool = _make_pool(self.settings)
                await pool.open(wait=True, timeout=self.settings.connect_timeout + 1)
                return pool
            except (DatabaseUnavailable, PoolTimeout) as exc:
                reason = str(exc) if isinstance(exc, DatabaseUnavailable) else "the connection pool timed out"
                self.health.database_ok = False
                self.health.database_error = reason
                delay = backoff.delay(attempt, at_least=min(attempt, 5) * 0.5)
                logger.warning(
                    "{reason} (attempt {n}); not ready, retrying in {delay:.1f} s",
                    reason=reason,
                    n=attempt,
                    delay=delay,
                )
                if pool is not None:
                    await pool.close()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_requested.wait(), delay)
        return None

    async def run(self) -> int:
        """The process, in its steps: the probes first, then the start-up (each step a person may have
        to fix goes through the ``StartGate``), the wiring of the pipeline and its watches, and the task
        group until a stop; whatever was opened is closed on the way out."""
        if self.handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        # The probes first: with POD_SWEEPER_ON_START_ERROR=wait, /livez answers while a start-up
        # error waits for a person (tasks/process/startup.py), so a sidecar's pod starts all the same.
        if self.settings.http_port:
            self.http = HealthServer(self.settings.http_host, self.settings.http_port, self.health, self.metrics)
            self.http.start()
        heart = asyncio.create_task(self._heartbeat(), name="heartbeat")
        opened = _Opened()
        try:
            started = await self._start(opened)
            if started is None:
                return EXIT_OK
            return await self._run_tasks(self._wire(started))
        finally:
            heart.cancel()
            self.notifier.close()
            if self.http is not None:
                self.http.close()
            if opened.pool is not None:
                await opened.pool.close()
            if opened.kube is not None:
                opened.kube.close()

    async def _start(self, opened: _Opened) -> _Started | None:
        """Start-up, in the order readiness needs (the module's docstring): the Kubernetes configuration,
        the database URL, the pool (retried until it opens), the schema, the first reads. None: the
        process is to end with 0 (a stop asked for while a step waited). What it opens goes in
        ``opened``, for ``run`` to close whatever happens."""
        gate = StartGate(self.settings.on_start_error, self.health, self.metrics, self.stop_requested)
        configuration = await gate.step("kubeconfig", self._kube_configuration)
        # No URL is a configuration error (exit 2, or a wait), before anything starts.
        if configuration is None or await gate.step("database_url", self._database_url) is None:
            return None
        opened.kube = kube = KubeClient(configuration)
        if armed := failpoints.arm(self.settings.failpoints):
            logger.warning(
                "failpoints armed: {points} ({spec}); this process will kill, raise in or stall itself on "
                "purpose: for chaos tests only",
                points=", ".join(armed),
                spec=self.settings.failpoints,
            )
        self.metrics.failpoints_armed.set(len(armed))
        self.notifier.status("connecting to the database")
        opened.pool = pool = await self._open_pool()
        if pool is None:
            return None
        version = await gate.step("schema", lambda: self._check_schema(pool))
        if version is None:
            return None
        # A role the schema's owner has not granted yet (a first install whose replicas start
        # before anyone ran `grant`) waits here like a schema that is behind, instead of exiting 1.
        attachments = await gate.step("privileges", lambda: self._first_reads(pool))
        if attachments is None:
            return None
        self.health.database_ok, self.health.database_error, self.health.schema_ok = True, None, True
        return _Started(pool, kube, version, attachments)

    def _wire(self, started: _Started) -> _Wired:
        """The pipeline and its watches, each handed what it needs; readiness told where to look."""
        settings, pool, kube = self.settings, started.pool, started.kube
        outage = OutageWatch(settings, pool, kube, self.metrics)
        schema = SchemaGate(self.metrics.schema_incompatible)
        store = OutboxStore(
            pool,
            cluster=settings.cluster,
            replica=settings.replica_id,
            attachments=started.attachments,
            due_horizon=settings.poll_interval,  # the claimer sleeps no longer than this anyway
            guard=settings.guard_standbys,
        )
        breaker = BreakerGate(self.metrics.breaker_tripped.labels(settings.cluster))
        sweeper = Sweeper(settings, store, kube, outage=outage, metrics=self.metrics, schema=schema, breaker=breaker)
        listener = Listener(settings, pool, sweeper.notify, self.metrics) if settings.listens else None
        self.sweeper, self.listener, self.outage = sweeper, listener, outage
        self._watch(sweeper, listener, outage)
        logger.info(
            "pod-sweeper running as {replica} for cluster {cluster}, schema version {version}, {mode}; "
            "deletes in {scope}",
            replica=settings.replica_id,
            cluster=settings.cluster,
            version=started.version,
            mode=settings.wakeup_mode() + (", DRY RUN: nothing is deleted" if settings.dry_run else ""),
            scope=NamespaceScope(settings.namespaces).describe(),
        )
        return _Wired(started, sweeper, listener, outage, schema, breaker)

    def _said_of_schema(self, error: str | None) -> None:
        self.health.schema_error = error

    async def _run_tasks(self, wired: _Wired) -> int:
        """The named tasks in one group until the shutdown watcher ends it (exit 0) or one dies (exit 1,
        the others cancelled, a line naming it)."""
        settings, pool, kube, metrics = self.settings, wired.started.pool, wired.started.kube, self.metrics
        sweeper, listener, outage = wired.sweeper, wired.listener, wired.outage
        tasks: dict[str, Coroutine[Any, Any, None]] = {}
        if listener is not None:
            tasks["listener"] = listener.run()
        tasks["outage watch"] = outage.run()
        tasks["sweeper"] = sweeper.run()
        tasks["readiness"] = self._become_ready(sweeper, listener)
        self.presence = Presence(settings, pool, lambda: (self.health.readiness()[0], self.health.waits()))
        tasks["presence"] = self.presence.run()
        tasks["shutdown"] = self._shutdown_when_asked(sweeper)
        tasks["retention"] = Retention(settings, pool, metrics).run()
        tasks["schema watch"] = SchemaWatch(settings, pool, metrics, wired.schema, self._said_of_schema).run()
        if SurgeRules.of(settings).watched:
            # A listening replica's watch sleeps through a quiet cluster until its claimer hears of rows
            activity = sweeper.claimer.activity if listener is not None else None
            self.surge_watch = SurgeWatch(settings, pool, wired.breaker, metrics, activity=activity)
            tasks["surge watch"] = self.surge_watch.run()
        tasks["confirmer"] = Confirmer(settings, pool, kube, metrics, outage).run()
        if settings.reconcile:
            tasks["reconciler"] = Reconciler(settings, pool, kube, metrics, outage).run()
        guard = settings.guard_standbys
        tasks["gauges"] = refresh_gauges(pool, metrics, self.health, GAUGE_REFRESH_SECONDS, settings.cluster, guard)
        failed = False
        try:
            async with asyncio.TaskGroup() as group:
                for name, coro in tasks.items():
                    group.create_task(_named(name, coro), name=name)
        except* _Stop:
            pass
        except* Exception:
            failed = True
        if failed:
            return EXIT_FAILURE
        logger.info("stopped cleanly")
        return EXIT_OK

    async def _kube_configuration(self) -> client.Configuration:
        return load_configuration(
            self.settings.kubeconfig,
            self.settings.kube_context,
            pool_size=self.settings.concurrency + KUBE_CONNECTIONS_BESIDE_THE_WORKERS,
        )

    async def _database_url(self) -> str:
        return self.settings.require_database_url()

    async def _check_schema(self, pool: AsyncConnectionPool[db.Connection]) -> int:
        async with pool.connection() as conn:
            with migrations.privileges_of(conn):
                return await migrations.check_schema(conn)

    async def _first_reads(self, pool: AsyncConnectionPool[db.Connection]) -> dict[int, Attachment]:
        """This replica's cluster row, the attachments, the attached count and the dry run's leftovers:
        the first statements that need the runtime role's grants beyond reading the ledger."""
        async with pool.connection() as conn:
            with migrations.privileges_of(conn):
                await outbox.cluster_rows(conn, cluster=self.settings.cluster)
                attachments = await load_attachments(conn)
                await count_attached(conn, self.settings, self.metrics, at_start=True)
                if not self.settings.dry_run:
                    shadow = sorted(self.settings.dry_run_namespaces or ())
                    reopened = await outbox.reopen_dry_run(conn, cluster=self.settings.cluster, keep=shadow)
                    if reopened:
                        logger.info("reopened {n} row(s) a dry run left as would_delete", n=reopened)
        return attachments

    async def _become_ready(self, sweeper: Sweeper, listener: Listener | None) -> None:
        if listener is not None:
            await listener.listening.wait()
        await sweeper.first_claim()
        self.health.started = True
        self.notifier.ready(self._status_line())
        logger.info(
            "ready: schema checked, {listen}first catch-up claim done", listen="listening, " if listener else ""
        )

    async def _shutdown_when_asked(self, sweeper: Sweeper) -> None:
        """The stop, in the order of tasks/sweep/stop.py: not ready, the sweeper's drain, the replica's
        row marked stopped."""
        await self.stop_requested.wait()
        self.health.stopping = True
        self.notifier.stopping()
        sweeper.stop.reach(Phase.NOT_READY)
        await sweeper.drain(time.monotonic() + self.settings.shutdown_timeout)
        if self.presence is not None:  # after the drain: until it ends, the replica still sweeps
            await self.presence.leave()
        sweeper.stop.reach(Phase.LEFT)
        raise _Stop

    def _status_line(self) -> str:
        m = self.metrics
        return (
            f"backlog {m.value('pod_sweeper_outbox_rows', status='pending'):.0f} pending, "
            f"{m.value('pod_sweeper_dead_rows'):.0f} dead, lag {m.value('pod_sweeper_lag_seconds'):.0f} s; "
            f"{m.value('pod_sweeper_outcomes_total', outcome='deleted'):.0f} deleted"
        )

    def _loop_healthy(self) -> bool:
        """For the systemd watchdog: the claimer is turning (or the database is down and being retried,
        which a restart would not cure)."""
        sweeper = self.sweeper
        if sweeper is None or not self.health.database_ok or self.health.stopping or sweeper.status.gated:
            return sweeper is not None
        return time.monotonic() - sweeper.status.last_turn < self._stall_seconds()

    def _stall_seconds(self) -> float:
        """How long the claimer's loop may stand still before the watchdog calls it wedged: two of its
        longest ordinary waits (a poll, a request) and a margin."""
        longest_wait = max(self.settings.poll_interval, self.settings.request_timeout)
        return longest_wait * STALL_WAITS + STALL_MARGIN_SECONDS

    def _waiting(self, wait: Wait) -> float:
        """``pod_sweeper_waiting{reason}``: 1 while the reason holds."""
        return 1.0 if wait in self.health.waits() else 0.0

    def _watch(self, sweeper: Sweeper, listener: Listener | None, outage: OutageWatch) -> None:
        """Readiness (and ``pod_sweeper_waiting``, and the wait log) read the listener and the gates where
        they live, when asked. (Each gate owns its own gauge.)"""

        def gates() -> dict[Wait, str]:
            active: dict[Wait, str] = {}
            if breaker := sweeper.status.breaker:
                active[Wait.BREAKER] = f"blast-radius breaker tripped: {breaker}"
            if unreachable := outage.reason:
                active[Wait.KUBE_UNREACHABLE] = unreachable
            if refusing := sweeper.status.refusing:
                active[Wait.KUBE_UNAUTHORIZED] = f"kubernetes refuses us: {refusing}"
            if refused := sweeper.status.refused_namespaces:
                active[Wait.NAMESPACE_REFUSED] = "namespace(s) " + ", ".join(sorted(refused))
            if self.settings.dry_run or self.settings.dry_run_namespaces:
                shadow = ", ".join(sorted(self.settings.dry_run_namespaces or ()))
                active[Wait.DRY_RUN] = "in " + ("every namespace" if self.settings.dry_run else shadow)
            return active

        self.health.watch(
            listener_ok=(lambda: listener.healthy) if listener is not None else (lambda: None),
            gates=gates,
        )
        if listener is not None and self.metrics.listener_healthy is not None:
            self.metrics.listener_healthy.set_function(lambda: 1.0 if listener.healthy else 0.0)

    async def _heartbeat(self) -> None:
        """The main loop's beat: keeps /livez and the gauges of process state current, pets the systemd
        watchdog while healthy, and refreshes the systemd STATUS line. (Readiness and the state gauges
        are read from their sources when asked: see ``_watch``.)"""
        last_pet = last_status = 0.0
        while True:
            now = time.monotonic()
            self.health.heartbeat = now
            interval = self.notifier.watchdog_interval
            # Petted only once READY=1 is out: before that, the unit's TimeoutStartSec governs.
            if interval is not None and self.health.started and now - last_pet >= interval and self._loop_healthy():
                self.notifier.watchdog()
                last_pet = now
            if self.health.started and now - last_status >= 5:
                self.notifier.status(self._status_line())
                last_status = now
            await asyncio.sleep(min(1.0, interval or 1.0))


# The tasks that take a connection from the daemon's pool, each at most one at a time (the LISTEN
# connection is not the pool's: it is its own session). The pool's size is their sum, so no task ever
# waits for another's connection; they open only as used (min_size 1), and idle ones close again.
POOL_USERS = {
    "claimer": 1,  # a claim, the next due time, the arming (one after another)
    "recorder": 1,  # a batch of results (the shutdown drain's flush takes the same lock)
    "listener's ping": 1,  # the NOTIFY the listener sends itself
    "gauges": 1,  # the lag view, every GAUGE_REFRESH_SECONDS
    "retention": 1,  # one batch at a time (given back during the pause between batches)
    "confirmer": 1,  # terminating pods due, and their confirmations
    "outage watch": 1,  # the outage's row, while one lasts
    "schema watch": 1,  # the ledger, every tasks/loops/schema_watch.py SCHEMA_WATCH_SECONDS
    "presence": 1,  # this replica's row, every tasks/loops/presence.py PRESENCE_SECONDS, and its stop
}
RECONCILER_CONNECTIONS = 1  # the reconciliation pass holds one for its whole pass


def pool_size(settings: Settings) -> int:
    """The pool's size, from the tasks this replica runs that take connections."""
    return sum(POOL_USERS.values()) + (RECONCILER_CONNECTIONS if settings.reconcile else 0)


def _make_pool(settings: Settings) -> AsyncConnectionPool[db.Connection]:
    return db.make_pool(settings, max_size=pool_size(settings))
