"""The sweeper: claim rows, delete their pods, record how each ended, in three kinds of task.

- the claimer (``claimer.Claimer``) claims and re-checks rows whenever the pipeline has room and
  something is due, and sleeps until a NOTIFY, the next due time or the poll;
- ``concurrency`` workers (``sender.Sender``) send each row's DELETE under its UID precondition and
  turn what came back into the row's result (``outcomes.decide``);
- the recorder (``recorder.Recorder``) writes the results in batches, fenced on the claim epoch.

They share one ``pipeline.Pipeline`` and the gates (``gates.AuthGate``, ``gates.NamespaceGates``,
``gates.BreakerGate``). This
class puts them together, runs them in one task group (any one dying stops the others) and ends them
gracefully: no new claims, in-flight deletes get until a deadline, the rest go back uncharged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.errors import first_line
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.kube.api import PodDeleter
from pod_sweeper.store import outbox
from pod_sweeper.store.db import Connection
from pod_sweeper.store.outbox import Final
from pod_sweeper.store.recheck import Attachment
from pod_sweeper.tasks.claimer import Claimer
from pod_sweeper.tasks.events import EventRecorder
from pod_sweeper.tasks.gates import AuthGate, BreakerGate, NamespaceGates
from pod_sweeper.tasks.outage import OutageWatch
from pod_sweeper.tasks.pipeline import Pipeline, Shared
from pod_sweeper.tasks.recorder import Recorder
from pod_sweeper.tasks.sender import Sender


class Sweeper:
    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Connection],
        deleter: PodDeleter,
        *,
        attachments: dict[int, Attachment],
        outage: OutageWatch,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.metrics = metrics or Metrics()
        backoff = Backoff(settings.backoff_base, settings.backoff_max)
        self.auth = AuthGate(backoff, floor=settings.backoff_base)  # the 401 circuit: every row
        self.namespaces = NamespaceGates(backoff, floor=settings.backoff_base)  # 403: one namespace's rows
        self.breaker = BreakerGate()
        self._stopping = asyncio.Event()
        # Rows held at once: one batch queued behind the deletes in flight, so the workers never wait
        # for a claim round trip. (Capping the queue at `concurrency` made claims small and frequent:
        # the drain ran at 0.54 of the client's ceiling, 0.76 with this; bench/README.md.) A queued
        # row whose lease runs short before a worker reaches it is handed back, not sent.
        self.pipeline = Pipeline(settings.concurrency + settings.batch_size)
        self.outage = outage
        shared = Shared(
            settings,
            self.pipeline,
            self.metrics,
            backoff,
            self.auth,
            self.namespaces,
            self.breaker,
            outage,
            self._stopping,
        )
        self.claimer = Claimer(shared, pool, attachments=attachments)
        # Events on deleted pods (best effort, paced, off the rows' path); none in a dry run.
        self.events = (
            EventRecorder(settings, deleter, self.metrics, outage) if settings.events and not settings.dry_run else None
        )
        self.sender = Sender(shared, deleter, self.events)
        self.recorder = Recorder(shared, pool, wake_claimer=self.claimer.notify)
        self._tasks: list[asyncio.Task[None]] = []  # claimer, recorder and workers, once run() starts

    # What the process (runner) and the probes read.

    def notify(self, source: str) -> None:
        """Wake the claimer (a NOTIFY arrived, the listener reconnected, ...)."""
        self.claimer.notify(source)

    @property
    def first_claim_done(self) -> asyncio.Event:
        return self.claimer.first_claim_done

    @property
    def last_turn(self) -> float:
        return self.claimer.last_turn

    @property
    def breaker_reason(self) -> str | None:
        return self.breaker.reason

    async def run(self) -> None:
        """Claimer, workers and recorder in one task group: any one dying stops the others."""
        async with asyncio.TaskGroup() as group:
            self._tasks = [
                group.create_task(self.claimer.run(), name="claimer"),
                group.create_task(self.recorder.run(), name="finalizer"),
            ]
            self._tasks += [
                group.create_task(self.sender.worker(), name=f"worker-{i}") for i in range(self.settings.concurrency)
            ]
            if self.events is not None:
                self._tasks.append(group.create_task(self.events.run(), name="events"))

    async def drain(self, deadline: float) -> None:
        """Stop claiming, let in-flight deletes finish until ``deadline`` (monotonic), hand back the
        rest without charging an attempt, record everything, send the queued Events in the time left
        (counting what cannot be sent), and stop the tasks."""
        pipeline = self.pipeline
        self._stopping.set()
        pipeline.room.set()
        while not pipeline.queue.empty():  # claimed but not started: back to pending at once
            pipeline.record(Final.hand_back(pipeline.queue.get_nowait().claim))
        # Each result sets `settled`; wait until every row in flight has one, or the deadline.
        while pipeline.awaiting_answers() and time.monotonic() < deadline:
            pipeline.settled.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pipeline.settled.wait(), deadline - time.monotonic())
        others = [task for task in self._tasks if task.get_name() not in ("finalizer", "events")]
        for task in others:
            task.cancel()
        # Cancelled once, a task inside a query lets psycopg cancel it on the server and keep the
        # connection; cancelled again before that ends, psycopg closes the connection and logs two
        # warnings. So each is cancelled once here, and waited for (briefly) before anything else.
        await asyncio.wait(others, timeout=2.0)
        for claim in pipeline.awaiting_answers():  # still at the API after the deadline
            pipeline.record(Final.hand_back(claim))
        try:
            await asyncio.wait_for(self.recorder.flush(), max(1.0, deadline - time.monotonic()))
        except (psycopg.Error, TimeoutError) as exc:
            logger.error(
                "could not record {n} result(s) at shutdown; their leases will expire: {error}",
                n=len(pipeline.results),
                error=first_line(exc),
            )
        events = next((task for task in self._tasks if task.get_name() == "events"), None)
        if self.events is not None and events is not None:
            await self.events.finish(events, deadline)
        await self._wake_the_others()
        for task in self._tasks:
            if not task.done():
                task.cancel()
        self.sender.close()

    async def _wake_the_others(self) -> None:
        # This replica may have cleared the wakeup flag (it was claiming) and is leaving: retires do not
        # NOTIFY now, and the other replicas sleep. One NOTIFY makes them claim, and arm it themselves.
        try:
            async with asyncio.timeout(2), self.pool.connection() as conn:
                await outbox.notify(conn, cluster=self.settings.cluster)
        except (psycopg.Error, TimeoutError) as exc:
            logger.warning("could not wake the other replicas on the way out: {error}", error=first_line(exc))
