"""The breaker's surge watch: every half second, what arrived in this replica's cluster, judged by the
surge rule (tasks/rules/surge.py) before the sweep deletes it. (The transaction rule is the claim's.)

A surge arrives over seconds, in many transactions, so no one claim sees it whole: the watch judges it
from the outbox before the sweep reaches the rows (one large transaction, which a claim does see whole,
the claim judges itself). Each replica of a cluster watches; the
trip is one idempotent UPDATE of the cluster's breaker row, so two replicas judging the same surge trip
it once, and each replica's workers stop at once on its own trip (the others at their next claim).

A quiet cluster is not looked at every half second: once a look finds nothing arrived within the
window, the watch of a listening replica sleeps until something may be arriving (a claim of its that
took rows: ``Claimer.activity``) or ``QUIET_LOOK_SECONDS`` pass. The first retire after a quiet spell
NOTIFYs (every replica sleeps then, so the wakeup flag is armed); the replica it wakes claims it, the
claim judging one large transaction by itself, and its watch looks right after: a surge is judged from
its first retires, by at least the replica that sweeps them, and the trip, one row, stops every
replica. A replica that only polls claims only at its poll, so its watch looks every half second
whatever it finds. Idle, the watch of each listening replica costs one read every QUIET_LOOK_SECONDS
instead of two a second.

The recent rate starts from the last ten minutes of the outbox, so a replica that restarts on a busy
cluster compares with that cluster's churn, not with zero; it then follows what the watch sees, but
not while the breaker is tripped or a surge is being judged (a surge must not teach itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import periodic
from pod_sweeper.core.errors import first_line
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep import breaker, rates
from pod_sweeper.tasks.rules.gates import BreakerGate
from pod_sweeper.tasks.rules.surge import BASELINE_SECONDS, SURGE_INTERVAL, SURGE_WINDOW, Baseline, SurgeRules, judge

# How long the watch of a listening replica sleeps through a quiet cluster at most (see above): what
# keeps the recent rate learning when no wakeup reaches this replica (another one is woken).
QUIET_LOOK_SECONDS = 30.0


class SurgeWatch:
    """One replica's watch over its cluster's arrivals. Owns ``pod_sweeper_breaker_surge_threshold``.
    ``activity``: set when retires may be arriving (None: look every half second, quiet or not)."""

    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Connection],
        breaker: BreakerGate,
        metrics: Metrics,
        *,
        activity: asyncio.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.pool, self.breaker, self.metrics = settings, pool, breaker, metrics
        self.rules = SurgeRules.of(settings)
        self.baseline: Baseline | None = None  # read from the outbox at the first step
        self.activity = activity
        self.quiet = False  # the last look found nothing arrived within the window
        self._clock = clock
        self._last = clock()

    async def run(self) -> None:
        while True:
            # Cleared before the look: whatever arrives during it or after it wakes the sleep below.
            if self.activity is not None:
                self.activity.clear()
            try:
                await self.step()
            except psycopg.Error as exc:
                self.quiet = False
                logger.warning("the breaker's surge watch failed: {error}", error=first_line(exc))
            if self.quiet and self.activity is not None:
                await periodic.pause(0)  # a stop a library swallowed is honoured here, as in every loop
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.activity.wait(), QUIET_LOOK_SECONDS)
            else:
                await periodic.pause(SURGE_INTERVAL)

    async def step(self) -> str | None:
        """One look: the reason it tripped the breaker, or None."""
        cluster = self.settings.cluster
        async with self.pool.connection() as conn:
            if self.baseline is None:
                self.baseline = Baseline(await rates.recent_rate(conn, cluster=cluster, seconds=BASELINE_SECONDS))
            seen = await rates.arrivals(
                conn,
                cluster=cluster,
                window=SURGE_WINDOW,
                dry_run=self.settings.dry_run,
                shadow=sorted(self.settings.dry_run_namespaces or ()),
                transaction_rows=self.rules.transaction_rows,
            )
            if seen is None:
                return None
            was_quiet, self.quiet = self.quiet, seen.arrived == 0 and seen.tripped_reason is None
            now = self._clock()
            elapsed, self._last = now - self._last, now
            if was_quiet and elapsed > SURGE_WINDOW:
                # Asleep through a quiet spell: nothing arrived for all but the window just read, so the
                # spell is learnt as a rate of 0 and this look as its own window, not as the whole spell
                # (a burst read right after a quiet half minute would otherwise count thirty-fold).
                self.baseline.learn(0.0, elapsed - SURGE_WINDOW)
                elapsed = SURGE_WINDOW
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
