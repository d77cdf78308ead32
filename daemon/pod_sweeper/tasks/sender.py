"""The workers: send each held row's DELETE and turn what came back into the row's result.

``concurrency`` workers each send one request at a time on a thread pool (the official client is
synchronous), paced by the token bucket and never with a timeout that outlasts the row's lease; when
the queue is deep a worker hands its thread a few rows at once, sent one after another. What a result
means for the row is ``outcomes.decide``'s to say; this module only applies it: the pipeline gets the
row's result, the auth gate hears of a 401 and the namespace gates of a 403, the outage watch of every
answer and of every request that got none (or a 5xx), the metrics and the log of everything. A row
that names a pod Kubernetes could not hold, or a namespace outside the scope, ends
dead before any request; a row of a namespace that answers 403 waits, uncharged, for that namespace's
gate, and nothing else does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from loguru import logger

from pod_sweeper.core.backoff import TokenBucket
from pod_sweeper.core.errors import KubeError, KubeRejected, KubeRetryable, KubeUnauthorized
from pod_sweeper.core.outcome import Outcome
from pod_sweeper.kube.api import Answer, PodDeleter
from pod_sweeper.kube.scope import NamespaceScope, invalid_name
from pod_sweeper.store.outbox import Attempt, Claim, Final
from pod_sweeper.tasks import outcomes
from pod_sweeper.tasks.events import EventRecorder
from pod_sweeper.tasks.outcomes import Decision, Verdict
from pod_sweeper.tasks.pipeline import Shared, Work

# A DELETE is not sent with less than this much of the lease left; the row is handed back instead.
MIN_REQUEST_SECONDS = 1.0
# Margin kept between the end of a request's timeout and the end of the lease.
LEASE_MARGIN_SECONDS = 2.0
# At most this many rows per hand-off from a worker to its thread (see Sender.worker).
MAX_CHUNK = 8


@dataclass(frozen=True)
class _Request:
    """One row's request as the pool thread saw it: when it started, how long it took, how it ended."""

    started_at: datetime
    sent: float  # time.monotonic() when it was sent (the outage watch compares answers with it)
    seconds: float
    result: Answer | Exception


class Sender:
    def __init__(self, shared: Shared, deleter: PodDeleter, events: EventRecorder | None) -> None:
        settings = self.settings = shared.settings
        self.deleter, self.pipeline, self.metrics = deleter, shared.pipeline, shared.metrics
        self.backoff, self.auth, self.namespaces, self.breaker, self.outage, self.stopping = (
            shared.backoff,
            shared.auth,
            shared.namespaces,
            shared.breaker,
            shared.outage,
            shared.stopping,
        )
        self.scope = NamespaceScope(settings.namespaces)
        self.events = events
        self.bucket = TokenBucket(settings.rate_limit_qps, settings.rate_limit_burst)
        self._executor = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="pod-delete")

    def close(self) -> None:
        """No more requests: rows waiting for a thread are dropped (the drain hands them back)."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def worker(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self.pipeline.queue
        while True:
            chunk = [await queue.get()]
            # With a deep queue, a worker takes a few rows per hand-off to its thread, which sends them
            # one after another: the asyncio-to-thread round trip per row was a good part of the
            # daemon's own CPU per row (bench/README.md). A shallow queue (a single retire) goes alone.
            for _ in range(min(MAX_CHUNK - 1, queue.qsize() // self.settings.concurrency)):
                chunk.append(queue.get_nowait())
            sendable: list[Work] = []
            for work in chunk:
                claim = work.claim
                if self._unsendable(claim):
                    continue
                await self.bucket.acquire()
                if not self._may_send(work):
                    self.pipeline.record(self._held_back(claim))
                    continue
                sendable.append(work)
            if sendable:
                sent = await loop.run_in_executor(self._executor, self._send, sendable)
                for work, request in zip(sendable, sent, strict=True):
                    await self._settle(work.claim, request)

    def _unsendable(self, claim: Claim) -> bool:
        """A row no request may be sent for ends dead here, with the reason: a pod Kubernetes could not
        hold by that name, or a namespace outside the scope."""
        why, kind = invalid_name(claim.pod_namespace, claim.pod_name), "invalid_name"
        if why is None:
            why, kind = self.scope.refuses(claim.pod_namespace), "out_of_scope"
        if why is None:
            return False
        logger.error("row {id} is dead, no request sent: {why}", id=claim.id, why=why)
        self.metrics.unsendable.labels(kind).inc()
        self.pipeline.record(Final.dead(claim, why))
        return True

    def _held_back(self, claim: Claim) -> Final:
        """A row not sent after all: handed back uncharged, after its namespace's gate when that is
        what holds it (else at once: the lease ran short, the API server cannot be reached, a 401, the
        breaker, shutdown)."""
        namespace = claim.pod_namespace
        if wait := self.namespaces.wait(namespace):
            return Final.hand_back(claim, error=self.namespaces.errors.get(namespace), delay=wait, http_status=403)
        return Final.hand_back(claim, error=self.outage.reason or self.auth.error or self.breaker.reason)

    @staticmethod
    def _lease_left(work: Work) -> float:
        """Seconds a request for this row may still take, the margin kept before its lease ends."""
        return work.lease_deadline - time.monotonic() - LEASE_MARGIN_SECONDS

    def _may_send(self, work: Work) -> bool:
        """Whether a DELETE for this row may start now (enough lease left, the API server reachable,
        neither the credentials nor the namespace refused, breaker closed)."""
        return (
            self._lease_left(work) >= MIN_REQUEST_SECONDS
            and self.outage.open
            and self.auth.open
            and self.breaker.open
            and not self.namespaces.wait(work.claim.pod_namespace)
        )

    def _send(self, chunk: list[Work]) -> list[_Request | None]:
        """On a pool thread: each row's DELETE (and GET after a 409) in turn. None for a row not sent
        (to be handed back): the lease ran short, Kubernetes refused our credentials or this row's
        namespace, the request before it got no answer at all (the outage watch decides what that means
        before more go out), or shutdown began while it waited behind the others of its chunk."""
        out: list[_Request | None] = []
        unauthorized = unanswered = False
        forbidden: set[str] = set()  # the gates hear of these only once the chunk is settled
        for i, work in enumerate(chunk):
            namespace = work.claim.pod_namespace
            if (
                unauthorized
                or unanswered
                or namespace in forbidden
                or (i and (self.stopping.is_set() or not self._may_send(work)))
            ):
                out.append(None)
                continue
            # resolve() may send a DELETE and then a GET: both must end before the lease does.
            timeout = min(self.settings.request_timeout, self._lease_left(work) / 2)
            claim = work.claim
            started_at, sent = datetime.now(UTC), time.monotonic()
            result: Answer | Exception
            try:
                result = self.deleter.resolve(claim.pod_namespace, claim.pod_name, str(claim.pod_uid), timeout=timeout)
            except Exception as exc:  # settled on the event loop, where every kind is told apart
                result = exc
                if isinstance(exc, KubeUnauthorized):
                    if exc.status == 403:
                        forbidden.add(namespace)
                    else:
                        unauthorized = True
                unanswered = isinstance(exc, KubeRetryable) and exc.status is None
            out.append(_Request(started_at, sent, time.monotonic() - sent, result))
        return out

    async def _settle(self, claim: Claim, request: _Request | None) -> None:
        """Record how one row's request ended (the answer table of docs/design.md, in outcomes)."""
        if request is None:
            self.pipeline.record(self._held_back(claim))
            return
        result = request.result
        self.metrics.delete_latency.observe(request.seconds)
        self.metrics.answered(outcomes.answer_label(result)).inc()
        server_down = False
        if outcomes.needs_probe(result):
            server_down = await self.outage.server_down(request.sent)
        elif isinstance(result, Answer | KubeError):
            self.outage.answered(request.sent)
        decision = outcomes.decide(
            result,
            attempts=claim.attempts,
            max_attempts=self.settings.max_attempts,
            backoff=self.backoff,
            server_down=server_down,
        )
        attempt = Attempt(request.started_at, request.seconds * 1000, decision.reason)
        if isinstance(result, Exception) and not isinstance(result, KubeError):  # a bug, or nobody foresaw it
            logger.opt(exception=result).error("unexpected error deleting row {id}", id=claim.id)
        # Answers given past authorization (a 429 of Priority and Fairness or a 5xx may come before it).
        if isinstance(result, Answer | KubeRejected):
            self._answered(claim.pod_namespace)
        if decision.verdict is Verdict.DONE:
            assert decision.outcome is not None
            final = Final.done(claim, decision.outcome, decision.http_status, attempt)
            if self.events is not None and decision.outcome is Outcome.DELETED:
                self.events.deleted(claim)
            self.pipeline.record(
                dataclasses.replace(final, confirm_in=decision.confirm_in) if decision.confirm_in else final
            )
        elif decision.verdict is Verdict.REFUSED:
            assert isinstance(result, KubeUnauthorized)
            self._refused(claim, result, attempt)
        elif decision.verdict is Verdict.HELD:
            error = (self.outage.reason or decision.error) if server_down else decision.error
            held = Final.hand_back(
                claim, error=error, delay=decision.delay, http_status=decision.http_status, attempt=attempt
            )
            self.pipeline.record(held)
        elif decision.verdict is Verdict.DEAD:
            self._log_dead(claim, decision)
            self.pipeline.record(Final.dead(claim, decision.error or "", decision.http_status, attempt))
        else:
            logger.info(
                "row {id} will be retried in {delay:.1f} s: {error}",
                id=claim.id,
                delay=decision.delay,
                error=decision.error,
            )
            self.pipeline.record(
                Final.retry(claim, decision.delay, decision.error or "", decision.http_status, attempt)
            )

    @staticmethod
    def _log_dead(claim: Claim, decision: Decision) -> None:
        if decision.exhausted:
            logger.error(
                "row {id} ({ns}/{pod}) is dead after {n} attempts: {error}",
                id=claim.id,
                ns=claim.pod_namespace,
                pod=claim.pod_name,
                n=claim.attempts,
                error=decision.error,
            )
        else:
            logger.error(
                "DELETE {ns}/{pod} rejected, row {id} is dead: {error}",
                ns=claim.pod_namespace,
                pod=claim.pod_name,
                id=claim.id,
                error=decision.error,
            )

    def _answered(self, namespace: str) -> None:
        """Kubernetes answered: the credentials work, and so does this namespace."""
        self.auth.answered()
        if namespace in self.namespaces.errors:
            self.namespaces.answered(namespace)
            self.metrics.namespace_refused.labels(namespace).set(0)
            logger.info("namespace {ns} answers again", ns=namespace)

    def _refused(self, claim: Claim, exc: KubeUnauthorized, attempt: Attempt) -> None:
        # A fault of the daemon, not of the row: charge nothing, say why. A 403 holds back this
        # namespace's rows; a 401 (the credentials) every row, and the claimer stops for a while.
        namespace = claim.pod_namespace
        if exc.status == 403:
            delay = self.namespaces.refused(namespace, str(exc))
            error = self.namespaces.errors[namespace]
            self.metrics.namespace_refused.labels(namespace).set(1)
            logger.error(
                "Kubernetes refused us in namespace {ns} (403); its rows wait {delay:.0f} s, the others go on: {error}",
                ns=namespace,
                delay=delay,
                error=error,
            )
        else:
            delay = self.auth.refused(str(exc))
            error = self.auth.error or str(exc)
            logger.error(
                "Kubernetes refused our credentials ({status}); not claiming for {delay:.0f} s: {error}",
                status=exc.status,
                delay=delay,
                error=error,
            )
        self.pipeline.record(Final.hand_back(claim, error=error, delay=delay, http_status=exc.status, attempt=attempt))
