"""Kubernetes Events on the pods the daemon deletes, so that ``kubectl get events`` in the pod's cluster
says why the pod went (the pod garbage collector and the eviction paths leave one too).

Best effort, and never in a row's way: the sender only queues an Event after the row's result is
decided; one task sends them, on its own thread, paced by a token bucket (``events_qps``, with a burst
of five seconds' worth), as client-go's recorder paces its own. A queue that is full (a burst of
deletions larger than the pacing lets through soon) drops the newest Event and counts it; a failed
or refused Event is counted and logged once in a while, never retried, and never touches its row.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from loguru import logger

from pod_sweeper.core.backoff import TokenBucket
from pod_sweeper.core.errors import KubeError
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.kube.api import PodDeleter, PodEvent
from pod_sweeper.store.outbox import Claim

QUEUE_SIZE = 1000  # Events waiting to be sent; more are dropped (and counted)
FAILURE_LOG_EVERY = 60.0  # seconds between two log lines about failing Events
REASON = "Retired"


class EventRecorder:
    def __init__(self, settings: Settings, deleter: PodDeleter, metrics: Metrics) -> None:
        self.settings, self.deleter, self.metrics = settings, deleter, metrics
        self.queue: asyncio.Queue[PodEvent] = asyncio.Queue(maxsize=QUEUE_SIZE)
        self.bucket = TokenBucket(settings.events_qps, max(1, round(settings.events_qps * 5)))
        self._last_failure_log = float("-inf")

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
        while True:
            event = await self.queue.get()
            await self.bucket.acquire()
            try:
                await asyncio.to_thread(self.deleter.record_event, event, timeout=self.settings.request_timeout)
            except KubeError as exc:
                self.metrics.events.labels("failed").inc()
                now = time.monotonic()
                if now - self._last_failure_log >= FAILURE_LOG_EVERY:
                    self._last_failure_log = now
                    logger.warning(
                        "could not record a Kubernetes Event (best effort; the pods are deleted all the same): {error}",
                        error=str(exc),
                    )
                continue
            self.metrics.events.labels("sent").inc()
