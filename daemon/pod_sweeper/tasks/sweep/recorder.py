"""The recorder: writes the rows' results in batches (the store's ``record_results``), fenced on each
claim's epoch, and counts each one by the ``Result`` it was written from.

It lingers a tenth of a second for a fuller batch, retries a database error with backoff, and keeps the
results in memory until they are written: if the process dies first, the lease expires and another
replica repeats the DELETE, which the UID precondition makes harmless (it answers 404 and the row ends
``absent``). A result refused by the fence (another replica took the lease over) is counted and left."""

from __future__ import annotations

from collections.abc import Callable

from loguru import logger

from pod_sweeper.core import failpoints, periodic
from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.errors import first_line
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.states import Status
from pod_sweeper.store.interface import StoreError, SweepStore
from pod_sweeper.store.rows import Verdict
from pod_sweeper.tasks.sweep.pipeline import Pipeline
from pod_sweeper.tasks.sweep.stop import StopOrder

RECORD_BATCH = 500
# With fewer results than RECORD_GATHER waiting, the recorder waits RECORD_LINGER seconds for more
# before writing. Nothing waits on a result being written but the row's lease (and the room it frees
# for claims), and its done_at: at 100 retires a second a tenth of a second gathers about ten verdicts
# a write, where 25 ms gathered two or three, a transaction every other retire (bench cost).
RECORD_GATHER = 50
RECORD_LINGER = 0.1


class Recorder:
    def __init__(
        self,
        store: SweepStore,
        pipeline: Pipeline,
        metrics: Metrics,
        *,
        backoff: Backoff,
        stop: StopOrder,
        wake_claimer: Callable[[str], None],
    ) -> None:
        self.store, self.pipeline, self.metrics = store, pipeline, metrics
        self.backoff, self.stop, self.wake_claimer = backoff, stop, wake_claimer

    async def run(self) -> None:
        failures = 0
        pipeline = self.pipeline
        while True:
            await pipeline.wait_for_results()
            if pipeline.unwritten < RECORD_GATHER and not self.stop.stopping:
                # Let results gather for a moment: written as they came (about 7 rows a statement in
                # a drain), the statement's own cost per row outweighed the row's (bench/README.md).
                await periodic.pause(RECORD_LINGER)
            try:
                await self.flush()
                failures = 0
            except StoreError as exc:
                failures += 1
                self.metrics.db_errors.inc()
                delay = self.backoff.delay(failures)
                logger.warning(
                    "recording {n} result(s) failed, retrying in {delay:.1f} s: {error}",
                    n=pipeline.unwritten,
                    delay=delay,
                    error=first_line(exc),
                )
                await periodic.pause(delay)

    async def flush(self) -> None:
        """Write every verdict waiting (the recorder's task and the shutdown drain both flush; the
        pipeline lets one write at a time)."""
        await self.pipeline.write_results(self._write, RECORD_BATCH)

    async def _write(self, batch: list[Verdict]) -> None:
        async with self.store.session() as session, session.transaction():
            owned = await session.record_results(batch)
            failpoints.hit("during_record")
        for verdict in batch:
            if verdict.id in owned:
                self.metrics.recorded(verdict.result)
            else:
                self.metrics.fenced.inc()
                logger.warning(
                    "row {id}: lease lost before its result was recorded; another replica owns it", id=verdict.id
                )
        if any(verdict.status is Status.PENDING for verdict in batch):
            # A retry's due time is likely earlier than what the claimer is sleeping towards (the
            # lease it held): wake it so it plans its sleep again.
            self.wake_claimer("retry")
