"""The recorder (the finalizer task): writes the rows' results in batches, fenced on each claim's epoch.

It lingers a few milliseconds for a fuller batch, retries a database error with backoff, and keeps the
results in memory until they are written: if the process dies first, the lease expires and another
replica repeats the DELETE, which the UID precondition makes harmless (it answers 404 and the row ends
``absent``). A result refused by the fence (another replica took the lease over) is counted and left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import failpoints
from pod_sweeper.core.errors import first_line
from pod_sweeper.store import outbox
from pod_sweeper.store.db import Connection
from pod_sweeper.tasks.pipeline import Shared

FINALIZE_BATCH = 500
# With fewer results than FINALIZE_GATHER waiting, the recorder waits FINALIZE_LINGER seconds for
# more before writing. Nothing waits on a result being written but the row's lease (and the room it
# frees for claims), so a few ms are free.
FINALIZE_GATHER = 50
FINALIZE_LINGER = 0.025


class Recorder:
    def __init__(
        self, shared: Shared, pool: AsyncConnectionPool[Connection], *, wake_claimer: Callable[[str], None]
    ) -> None:
        self.pool, self.wake_claimer = pool, wake_claimer
        self.settings, self.pipeline, self.metrics = shared.settings, shared.pipeline, shared.metrics
        self.backoff, self.stopping = shared.backoff, shared.stopping
        self._lock = asyncio.Lock()

    async def run(self) -> None:
        failures = 0
        pipeline = self.pipeline
        while True:
            await pipeline.results_ready.wait()
            if len(pipeline.results) < FINALIZE_GATHER and not self.stopping.is_set():
                # Let results gather for a moment: written as they came (about 7 rows a statement in
                # a drain), the statement's own cost per row outweighed the row's (bench/README.md).
                await asyncio.sleep(FINALIZE_LINGER)
            try:
                await self.flush()
                failures = 0
            except psycopg.Error as exc:
                failures += 1
                self.metrics.db_errors.inc()
                delay = self.backoff.delay(failures)
                logger.warning(
                    "recording {n} result(s) failed, retrying in {delay:.1f} s: {error}",
                    n=len(pipeline.results),
                    delay=delay,
                    error=first_line(exc),
                )
                await asyncio.sleep(delay)

    async def flush(self) -> None:
        """Write every result waiting. The recorder's task and the shutdown drain both flush; one at a
        time, or the same results would be written (and removed from the list) twice."""
        async with self._lock:
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        pipeline = self.pipeline
        while pipeline.results:
            batch = pipeline.results[:FINALIZE_BATCH]
            async with self.pool.connection() as conn, conn.transaction():
                owned = await outbox.finalize(conn, batch, self.settings.replica_id)
                failpoints.hit("during_finalize")
            del pipeline.results[: len(batch)]
            for final in batch:
                if final.id not in owned:
                    self.metrics.fenced.inc()
                    logger.warning(
                        "row {id}: lease lost before its result was recorded; another replica owns it", id=final.id
                    )
                elif final.status == "done" and final.outcome:
                    self.metrics.finished(final.outcome).inc()
                elif final.status == "dead":
                    self.metrics.dead.inc()
                elif final.refund:
                    self.metrics.handed_back.inc()
                else:
                    self.metrics.retries.inc()
            pipeline.release(batch)
            if any(f.status == "pending" for f in batch):
                # A retry's due time is likely earlier than what the claimer is sleeping towards (the
                # lease it held): wake it so it plans its sleep again.
                self.wake_claimer("retry")
        pipeline.results_ready.clear()
