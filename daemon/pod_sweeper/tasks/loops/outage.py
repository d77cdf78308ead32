"""The outage watch: tells an API server that cannot be reached from a row whose DELETE failed, and
holds every row, uncharged, while the outage lasts.

A DELETE that got no answer or a 5xx may be the row's own trouble (its pod's admission webhook timing
out) or the server's (down, restarting, partitioned away, its etcd gone). The line: it is the row's,
and charged as an attempt, when the server shows it is up: it answered another request of this replica
after this one was sent, or its health check (``GET /readyz``, which every identity may read and which
fails with etcd) answered after it. Otherwise the gate closes:

- nothing goes out but a probe of ``/readyz``, after a backoff that grows to half a minute;
- the rows in hand go back uncharged with the reason on the row, and the claimer claims nothing;
- readiness, ``pod_sweeper_kube_unreachable{pod_cluster}``, the log and a row of ``pod_sweeper.outages``
  say so;
- the first probe the server answers opens the gate, and the claimer claims at once.

The confirmer, the reconciliation pass and the Events task send nothing while it is closed either. The
replica also probes once at start, so a kubeconfig that points at nothing is not ready from the start.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import periodic
from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.errors import first_line
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.kube.answer import Said
from pod_sweeper.kube.interface import SweepKube
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep import outages
from pod_sweeper.tasks.rules.gates import OutageGate

# The database row is written with this connection timeout: an outage of the API server is often a
# network's, and the database may be behind the same trouble; the watch must not hang on it.
RECORD_TIMEOUT_SECONDS = 5.0


class OutageWatch:
    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Connection],
        kube: SweepKube,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.settings, self.pool, self.kube, self.metrics = settings, pool, kube, metrics
        self._clock = clock
        # The probes' jitter; its own unseeded generator unless given one (the simulator, tests/sim, seeds it).
        probes = Backoff.for_reconnects(settings.backoff_base, settings.backoff_max, rng=rng)
        self.gate = OutageGate(probes, clock=clock)
        self.opened = asyncio.Event()  # set while the gate is open (what the claimer and Events wait on)
        self.opened.set()
        self._changed = asyncio.Event()  # the gate closed: the watch's loop starts probing
        self._alive_at = float("-inf")  # when the server last showed it is up (an answer, a probe)
        self._probing: asyncio.Task[None] | None = None
        self._gauge = metrics.kube_unreachable.labels(settings.cluster)
        self._gauge.set(0)

    @property
    def open(self) -> bool:
        return self.gate.open

    @property
    def reason(self) -> str | None:
        """Why the gate is closed, with when the next probe goes (readiness and the rows say it)."""
        if self.gate.reason is None:
            return None
        return f"the Kubernetes API server cannot be reached: {self.gate.reason}"

    def answered(self, at: float) -> None:
        """A request sent at ``at`` (monotonic) got an answer about its row: the server was up then."""
        self._alive_at = max(self._alive_at, at)

    async def server_down(self, sent_at: float) -> bool:
        """A request sent at ``sent_at`` got no answer or a 5xx: is the server down (the row is not to be
        charged), or does it answer (the row's own trouble)? Probes only when nothing answered since."""
        while True:
            if not self.gate.open:
                return True
            if self._alive_at >= sent_at:
                return False
            # Either way the probe settles it: a failure closes the gate, an answer moves _alive_at to
            # the probe's start (a probe already under way when this request was sent is followed by
            # another).
            await self._probe()

    async def _probe(self) -> None:
        """Probe the server and apply the answer; one probe at a time, however many ask."""
        if self._probing is None or self._probing.done():
            self._probing = asyncio.create_task(self._probe_once(), name="kube-probe")
        await asyncio.shield(self._probing)

    async def _probe_once(self) -> None:
        started = self._clock()
        answer = await asyncio.to_thread(self.kube.probe, timeout=self.settings.request_timeout)
        if answer.needs_probe or answer.said is Said.UNSENT:  # no answer or a 5xx: down; unsent: nothing goes out
            self._close(str(answer))
        elif self.gate.open:
            self.answered(started)
        else:
            self._reopen(started)

    def _close(self, reason: str) -> None:
        first = self.gate.open
        delay = self.gate.close(reason)
        self.opened.clear()
        self._gauge.set(1)
        self._changed.set()
        if first:
            logger.error(
                "the Kubernetes API server cannot be reached: {reason}; every row waits, uncharged, and nothing "
                "is sent but a probe (next in {delay:.1f} s)",
                reason=reason,
                delay=delay,
            )
        else:
            logger.info(
                "the Kubernetes API server still cannot be reached (probe {n}): {reason}; next probe in {delay:.1f} s",
                n=self.gate.failures,
                reason=reason,
                delay=delay,
            )

    def _reopen(self, at: float) -> None:
        closed_for = self.gate.reopen()
        self.answered(at)
        self._gauge.set(0)
        self.opened.set()
        logger.warning("the Kubernetes API server answers again after {s:.0f} s; claiming", s=closed_for)

    async def run(self) -> None:
        """Probe once at start; then, while the gate is closed, probe after each backoff until the server
        answers, and keep the outage's row in the database current."""
        where = {"cluster": self.settings.cluster, "replica": self.settings.replica_id}
        await self._write(outages.clear_outage, **where)  # a row a previous process of this replica left
        await self._probe()
        recorded = False
        while True:
            if self.gate.open:
                if recorded:
                    await self._write(outages.clear_outage, **where)
                    recorded = False
                self._changed.clear()
                await self._changed.wait()
                continue
            since = self.gate.since if self.gate.since is not None else self._clock()
            await self._write(
                outages.report_outage, **where, reason=self.gate.reason or "", closed_for=self._clock() - since
            )
            recorded = True
            await periodic.pause(self.gate.wait())
            await self._probe()

    async def _write(self, statement: Callable[..., Awaitable[None]], **params: object) -> None:
        """The outage's row, best effort: a database that fails too is the database's own story (the
        claimer and readiness tell it), not a reason to stop watching the API server."""
        try:
            async with asyncio.timeout(RECORD_TIMEOUT_SECONDS), self.pool.connection() as conn:
                await statement(conn, **params)
        except (psycopg.Error, TimeoutError) as exc:
            logger.info("could not record the API outage in the database: {error}", error=first_line(exc))
