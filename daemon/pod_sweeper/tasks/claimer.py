"""The claimer: claims (and re-checks) rows whenever the pipeline has room and something is due.

Then it sleeps until a NOTIFY, the next due time (a backoff ending, a lease expiring) or the poll
interval, whichever comes first. Before it sleeps it arms the wakeup flag, so that retires NOTIFY
(they do not while a sweeper is claiming: migration 0007), and claims once more. With the
blast-radius breaker on, the cluster's budget and the claim run in one transaction holding the cluster's
breaker row. While the API server cannot be reached (the outage watch), it claims nothing, and claims
at once when the server answers again.
A database error is retried with backoff; the rows it claims go to the pipeline only after the claim's
transaction has committed, so no DELETE ever runs inside a transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import failpoints
from pod_sweeper.core.errors import first_line
from pod_sweeper.store import outbox
from pod_sweeper.store.db import Connection
from pod_sweeper.store.recheck import Attachment
from pod_sweeper.tasks.gates import breaker_budget, trip_reason
from pod_sweeper.tasks.pipeline import Shared

# The shortest sleep between claims when rows are due but all locked by other replicas.
MIN_CLAIM_PAUSE = 0.05
# While an open retire keeps the wakeup flag from being armed, claim again after this pause, doubling
# up to the cap: the wake latency while writers keep the flag busy (a NOTIFY-free stream of retires).
ARM_RETRY_MIN = 0.002
ARM_RETRY_MAX = 0.05


class Claimer:
    def __init__(
        self, shared: Shared, pool: AsyncConnectionPool[Connection], *, attachments: dict[int, Attachment]
    ) -> None:
        self.pool, self.attachments = pool, attachments
        self.settings, self.pipeline, self.metrics = shared.settings, shared.pipeline, shared.metrics
        self.backoff, self.auth, self.breaker, self.outage, self.stopping = (
            shared.backoff,
            shared.auth,
            shared.breaker,
            shared.outage,
            shared.stopping,
        )
        self.wake = asyncio.Event()
        self.wake_source = "start"
        self.last_turn = time.monotonic()  # the claimer's heartbeat, for the systemd watchdog
        # Waiting out a closed gate (the API server unreachable, a 401) on purpose: the heartbeat stands
        # still, and a restart would cure nothing, so the watchdog must not count it as a stall.
        self.gated = False
        self.first_claim_done = asyncio.Event()  # the start-up catch-up claim ran (readiness waits on it)

    def notify(self, source: str) -> None:
        """Wake the claimer (a NOTIFY arrived, the listener reconnected, a retry fell due, ...)."""
        self.wake_source = source
        self.wake.set()

    async def _sleep_until_wake(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), timeout)
            self.metrics.wakeups.labels(self.wake_source).inc()
            return
        self.metrics.wakeups.labels("poll").inc()

    async def _sleep_until_stop(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def _sleep_until_reachable(self) -> None:
        """Until the outage watch opens its gate again, or the stop."""
        waits = [asyncio.ensure_future(self.outage.opened.wait()), asyncio.ensure_future(self.stopping.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    async def run(self) -> None:
        db_failures = 0
        just_armed = False  # the next claim is the one after arming: it must not clear the flag
        arm_retry = ARM_RETRY_MIN
        pipeline = self.pipeline
        while not self.stopping.is_set():
            self.last_turn = time.monotonic()
            if not self.outage.open or not self.auth.open:
                self.gated = True
                try:
                    if not self.outage.open:
                        await self._sleep_until_reachable()
                    else:
                        await self._sleep_until_stop(self.auth.wait())
                finally:
                    self.gated = False
                continue
            room = pipeline.free
            # Claim when the workers may run dry, or a whole batch fits: claiming whatever room each
            # finalize freed made claims of about 5 rows in a drain, a claim and a re-check per 5 rows.
            if room <= 0 or (pipeline.queue.qsize() > self.settings.concurrency and room < self.settings.batch_size):
                pipeline.room.clear()
                await pipeline.room.wait()
                continue
            want = min(self.settings.batch_size, room)
            self.wake.clear()  # before the claim: a NOTIFY during it must wake the next sleep
            started = time.monotonic()
            try:
                async with self.pool.connection() as conn, self._breaker_section(conn):
                    want = await self._breaker_budget(conn, want)
                    if want == 0:
                        result = None
                    else:
                        result = await outbox.claim(
                            conn,
                            owner=self.settings.replica_id,
                            batch=want,
                            lease_seconds=self.settings.lease_seconds,
                            max_attempts=self.settings.max_attempts,
                            attachments=self.attachments,
                            recheck_retry_delay=self.backoff.delay(1),
                            # A poll-only replica cannot hear NOTIFY, so it neither arms nor clears
                            # the flag: clearing it would silence the retires for listening replicas.
                            disarm=self.settings.listens and not just_armed,
                            cluster=self.settings.cluster,
                        )
            except psycopg.Error as exc:
                db_failures += 1
                self.metrics.db_errors.inc()
                delay = self.backoff.delay(db_failures)
                logger.warning("claim failed, retrying in {delay:.1f} s: {error}", delay=delay, error=first_line(exc))
                await self._sleep_until_stop(delay)
                continue
            db_failures = 0
            after_arming, just_armed = just_armed, False
            self.first_claim_done.set()
            if result is None:  # the breaker holds deletes back: look again at the next wake or poll
                await self._sleep_until_wake(self.settings.poll_interval)
                continue
            got = result.taken
            if result.expired_dead:
                logger.error("{n} row(s) went dead: their leases expired with no attempts left", n=result.expired_dead)
                self.metrics.dead.inc(result.expired_dead)
            if result.skipped:
                self.metrics.finished("skipped_active").inc(result.skipped)
            self.metrics.claimed.inc(got)
            if result.to_delete:
                failpoints.hit("after_claim")
            pipeline.hold(result.to_delete, started + self.settings.lease_seconds)
            if got:
                arm_retry = ARM_RETRY_MIN
            if got >= want:
                continue  # a full batch: there may be more right now
            # Only now, with the rows already queued: a woken sweeper's DELETE does not wait for this.
            due = await self._next_due()
            pause = self.settings.poll_interval if due is None else min(self.settings.poll_interval, max(due, 0.0))
            pause = max(pause, MIN_CLAIM_PAUSE)
            if self.settings.listens and not after_arming:
                if await self._arm():
                    just_armed = True
                    continue  # claim once more: what committed before the arming was not announced
                pause, arm_retry = min(pause, arm_retry), min(arm_retry * 2, ARM_RETRY_MAX)
            await self._sleep_until_wake(pause)

    async def _next_due(self) -> float | None:
        """Seconds until the next open row is due (see outbox.next_due); None when there is none or
        the database failed (then the poll interval applies, and the next claim reports the failure)."""
        try:
            async with self.pool.connection() as conn:
                return await outbox.next_due(conn, self.settings.cluster)
        except psycopg.Error:
            return None

    async def _arm(self) -> bool:
        """Arm the wakeup flag before sleeping; False when it cannot be armed now (or the database
        failed: then the claim that follows reports it)."""
        try:
            async with self.pool.connection() as conn:
                if await outbox.arm(conn, self.settings.replica_id, self.settings.cluster):
                    return True
        except psycopg.Error:
            return False
        self.metrics.arm_deferred.inc()
        return False

    @contextlib.asynccontextmanager
    async def _breaker_section(self, conn: Connection) -> AsyncIterator[None]:
        """With the breaker on, the budget and the claim run in one transaction (the claim's own becomes
        a savepoint), which the budget's read holds the cluster's breaker row in; with it off, nothing."""
        if not self.settings.max_deletes_per_minute:
            yield
            return
        async with conn.transaction():
            yield

    async def _breaker_budget(self, conn: Connection, want: int) -> int:
        """How many rows this claim may take under the cluster's blast-radius breaker (0: none; tripped or
        the minute's budget spent). Counts the cluster's deletes by every replica, from the attempt history."""
        limit = self.settings.max_deletes_per_minute
        if not limit:
            return want
        window = await outbox.breaker_window(conn, self.settings.cluster)
        self.breaker.reason = window.tripped_reason
        if (budget := breaker_budget(limit, window, want)) > 0 or window.tripped_reason is not None:
            return budget
        due = await outbox.next_due(conn, self.settings.cluster)
        if due is not None and due <= 0:  # work is waiting, and the minute's deletes are spent: trip
            reason = trip_reason(limit, window, self.settings.cluster)
            await outbox.trip_breaker(conn, self.settings.cluster, reason, self.settings.replica_id)
            self.breaker.reason = reason
            logger.critical("blast-radius breaker tripped, no more deletes: {reason}", reason=reason)
        return 0
