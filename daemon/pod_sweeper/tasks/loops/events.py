"""Kubernetes Events on the pods the daemon deletes, so that ``kubectl get events`` in the pod's cluster
says why the pod went (the pod garbage collector and the eviction paths leave one too).

Best effort, and never in a row's way: the sender only queues an Event after the row's result is
decided; one task sends them, on its own thread, paced by a token bucket (``events_qps``, with a burst
of five seconds' worth), as client-go's recorder paces its own. A queue that is full (a burst of
deletions larger than the pacing lets through soon) drops the newest Event and counts it; a failed
or refused Event is counted and logged once in a while, never retried, and never touches its row.
While the API server cannot be reached (the outage watch) nothing is sent; the queue waits.

At a stop the queue is sent until the shutdown deadline at the DELETE rate (the deletes have stopped,
so their share of the API server is free), and what is still queued then is counted as dropped and
logged once with its number (``finish``): a stop loses no Event silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime

from loguru import logger

from pod_sweeper.core.backoff import TokenBucket
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.kube.errors import KubeError
from pod_sweeper.kube.interface import PodEvent, SweepKube
from pod_sweeper.store.rows import Claim
from pod_sweeper.tasks.loops.outage import OutageWatch

QUEUE_SIZE = 1000  # Events waiting to be sent; more are dropped (and counted)
FAILURE_LOG_EVERY = 60.0  # seconds between two log lines about failing Events
REASON = "Retired"
# At a stop, how long past the deadline the Event being sent may take to end (its timeout ends with the
# deadline; this is the margin for the answer to come back to the loop).
LAST_SEND_GRACE = 1.0


class EventSender:
    def __init__(self, settings: Settings, kube: SweepKube, metrics: Metrics, outage: OutageWatch) -> None:
        self.settings, self.kube, self.metrics, self.outage = settings, kube, metrics, outage
        self.queue: asyncio.Queue[PodEvent] = asyncio.Queue(maxsize=QUEUE_SIZE)
        self.bucket = TokenBucket(settings.events_qps, max(1, round(settings.events_qps * 5)))
        self._last_failure_log = float("-inf")
        self._in_hand: PodEvent | None = None  # taken from the queue, not yet sent (or failed)
        self._progress = asyncio.Event()  # an Event was sent or failed
        self._deadline: float | None = None  # set by finish(): no send may outlast it
        self._closing = False  # set by finish() at the deadline: take no new Event

    def deleted(self, claim: Claim) -> None:
        """Queue the Event for a pod this replica deleted (never waits, never fails)."""
        what = "deleted" if claim.reason == "row_deleted" else "retired"
        message = (
            f"Deleted by pod-sweeper: execution {claim.sandbox_id} generation {claim.generation} was {what} "
            f"(outbox row {claim.id}, reason {claim.reason})"
        )
        event = PodEvent(
            claim.pod_namespace,
            claim.pod_name,
            str(claim.pod_uid),
            REASON,
            message,
            self.settings.replica_id,
            datetime.now(UTC),
        )
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.metrics.events.labels("dropped").inc()

    async def run(self) -> None:
        while not self._closing:
            event = self._in_hand = await self.queue.get()
            await self.outage.opened.wait()  # nothing goes out while the API server cannot be reached
            await self.bucket.acquire()
            timeout = self.settings.request_timeout
            if self._deadline is not None:
                timeout = max(0.1, min(timeout, self._deadline - time.monotonic()))
            try:
                await asyncio.to_thread(self.kube.create_event, event, timeout=timeout)
            except KubeError as exc:
                self.metrics.events.labels("failed").inc()
                now = time.monotonic()
                if now - self._last_failure_log >= FAILURE_LOG_EVERY:
                    self._last_failure_log = now
                    logger.warning(
                        "could not record a Kubernetes Event (best effort; the pods are deleted all the same): {error}",
                        error=str(exc),
                    )
            else:
                self.metrics.events.labels("sent").inc()
            self._in_hand = None
            self._progress.set()

    async def finish(self, task: asyncio.Task[None], deadline: float) -> int:
        """At a stop: send what is queued until ``deadline`` (monotonic), at the DELETE rate limit; then
        stop ``task`` (the one running :meth:`run`), count what was not sent as dropped and say so in one
        line. Returns that number."""
        self._deadline = deadline
        self.bucket = TokenBucket(self.settings.rate_limit_qps, self.settings.rate_limit_burst)
        while (not self.queue.empty() or self._in_hand is not None) and not task.done():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), left)
        # Past the deadline: no new Event is taken, and the one being sent (its timeout ends with the
        # deadline) is let finish, so that it is counted as what it was, sent or failed.
        self._closing = True
        if self._in_hand is not None and not task.done():
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), LAST_SEND_GRACE)
        task.cancel()
        await asyncio.wait([task], timeout=1.0)
        dropped = self.queue.qsize() + (self._in_hand is not None)
        while not self.queue.empty():
            self.queue.get_nowait()
        if dropped:
            self.metrics.events.labels("dropped").inc(dropped)
            logger.warning(
                "{n} Kubernetes Event(s) on deleted pods were not sent before the shutdown deadline "
                '(counted in pod_sweeper_events_total{{result="dropped"}}); the pods are deleted all the same',
                n=dropped,
            )
        return dropped
