"""The breaker's surge watch: every half second, what arrived in this replica's cluster, judged by the
surge rule (tasks/rules/surge.py) before the sweep deletes it. (The transaction rule is the claim's.)

A surge arrives over seconds, in many transactions, so no one claim sees it whole: the watch judges it
from the outbox before the sweep reaches the rows (one large transaction, which a claim does see whole,
the claim judges itself). Each replica of a cluster watches; the
trip is one idempotent UPDATE of the cluster's breaker row, so two replicas judging the same surge trip
it once, and each replica's workers stop at once on its own trip (the others at their next claim).

The recent rate starts from the last ten minutes of the outbox, so a replica that restarts on a busy
cluster compares with that cluster's churn, not with zero; it then follows what the watch sees, but
not while the breaker is tripped or a surge is being judged (a surge must not teach itself).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import periodic
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep import breaker, rates
from pod_sweeper.tasks.rules.gates import BreakerGate
from pod_sweeper.tasks.rules.surge import BASELINE_SECONDS, SURGE_INTERVAL, SURGE_WINDOW, Baseline, SurgeRules, judge


class SurgeWatch:
    """One replica's watch over its cluster's arrivals. Owns ``pod_sweeper_breaker_surge_threshold``."""

    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Connection],
        breaker: BreakerGate,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.pool, self.breaker, self.metrics = settings, pool, breaker, metrics
        self.rules = SurgeRules.of(settings)
        self.baseline: Baseline | None = None  # read from the outbox at the first step
        self._clock = clock
        self._last = clock()

    async def run(self) -> None:
        await periodic.every(lambda: SURGE_INTERVAL, "the breaker's surge watch", self.step, expected=(psycopg.Error,))

    async def step(self) -> str | None:
        """One look: the reason it tripped the breaker, or None."""
        cluster = self.settings.cluster
        async with self.pool.connection() as conn:
            if self.baseline is None:
                self.baseline = Baseline(await rates.recent_rate(conn, cluster=cluster, seconds=BASELINE_SECONDS))
            seen = await rates.arrivals(conn, cluster=cluster, window=SURGE_WINDOW)
            if seen is None:
                return None
            now = self._clock()
            elapsed, self._last = now - self._last, now
            self.metrics.breaker_surge_threshold.labels(cluster).set(self.rules.threshold(self.baseline.rate))
            if seen.tripped_reason is not None:
                return None
            reason = judge(self.rules, seen, self.baseline.rate, cluster)
            if reason is None:
                self.baseline.learn(seen.rate, elapsed)
                return None
            await breaker.trip_breaker(conn, cluster, reason, self.settings.replica_id)
        self.breaker.observe(reason)
        logger.critical("blast-radius breaker tripped, no more deletes: {reason}", reason=reason)
        return reason
