"""The workers: send the DELETE of each row in hand, and record what the answer table says it means.

``concurrency`` workers each send one request at a time on a thread pool (the official client is
synchronous), paced by the token bucket and never with a timeout that outlasts the row's lease; when
the queue is deep a worker hands its thread a few rows at once, sent one after another. For each row,
in this order:

1. a row no request may be sent for (a name Kubernetes could not hold, a namespace out of scope) ends
   dead at once, and a row a gate holds back (a namespace's 403, a 401, the breaker, the API server
   unreachable, a lease run short, the stop) goes back uncharged;
2. the DELETE, and the GET after a 409 (``KubeClient.delete_pod``), which come back as one ``Answer``;
3. the gates hear of the answer: the outage watch of every answer and of every request that got none
   (or a 5xx), the auth gate of a 401, a namespace's gate of a 403 or of its first answer since;
   what the answer is, each asks of its ``said`` and properties, never of a status code;
4. ``verdicts.decide`` says how the row ends (its ``Verdict``), which goes to the pipeline; the metrics, the
   log line and, for a deleted pod, its Event follow from that ``Verdict``.

**Threads.** ``_send`` runs on a pool thread; everything else here runs on the event loop. What the
thread reads that the loop writes: the gates, through ``_may_send`` (each keeps its state as one frozen
snapshot the loop replaces whole: tasks/rules/gates.py, "Threads"), and the stop's ``stopping`` (one integer
the loop writes: stop.py). What it reads besides is not written while it runs: its chunk (frozen ``Work`` and ``Claim``
values), the settings, the scope. What it writes is only its return value, which the loop then settles:
no gate, metric of a row's outcome or pipeline entry is touched from the thread. The client it calls
is safe from many threads (kube/api.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from loguru import logger

from pod_sweeper.core import failpoints
from pod_sweeper.core.backoff import TokenBucket
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.core.states import Result
from pod_sweeper.kube.answer import Answer, Said
from pod_sweeper.kube.interface import SweepKube
from pod_sweeper.kube.scope import NamespaceScope, invalid_name
from pod_sweeper.store.rows import Claim, Verdict
from pod_sweeper.tasks.loops.events import EventSender
from pod_sweeper.tasks.loops.outage import OutageWatch
from pod_sweeper.tasks.rules import verdicts
from pod_sweeper.tasks.rules.gates import AuthGate, BreakerGate, NamespaceGates, Refusal
from pod_sweeper.tasks.rules.verdicts import Policy, Sent
from pod_sweeper.tasks.sweep.pipeline import Pipeline, Work
from pod_sweeper.tasks.sweep.report import log_verdict
from pod_sweeper.tasks.sweep.stop import StopOrder

# A DELETE is not sent with less than this much of the lease left; the row is handed back instead.
MIN_REQUEST_SECONDS = 1.0
# Margin kept between the end of a request's timeout and the end of the lease.
LEASE_MARGIN_SECONDS = 2.0
# At most this many rows per hand-off from a worker to its thread (see Sender.worker).
MAX_CHUNK = 8


class Sender:
    def __init__(
        self,
        settings: Settings,
        kube: SweepKube,
        pipeline: Pipeline,
        metrics: Metrics,
        *,
        policy: Policy,
        auth: AuthGate,
        namespaces: NamespaceGates,
        breaker: BreakerGate,
        outage: OutageWatch,
        stop: StopOrder,
        events: EventSender | None,
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.kube, self.pipeline, self.metrics, self.policy = settings, kube, pipeline, metrics, policy
        self.auth, self.namespaces, self.breaker, self.outage = auth, namespaces, breaker, outage
        self.stop, self.events = stop, events
        self._clock = clock  # the claimer's: the leases' deadlines are on it
        self._timer = timer  # the requests' timings, on the outage watch's clock (time.monotonic in the daemon)
        self.scope = NamespaceScope(settings.namespaces)
        # The one owner of "is this DELETE a dry run": everywhere (POD_SWEEPER_DRY_RUN), or in the
        # namespaces of a staged rollout (POD_SWEEPER_DRY_RUN_NAMESPACES).
        self._dry_everywhere = settings.dry_run
        self._dry_namespaces = settings.dry_run_namespaces or frozenset()
        self.bucket = TokenBucket(settings.rate_limit_qps, settings.rate_limit_burst)
        # The threads the requests run on, a chunk of rows at a time (``_send``).
        self.threads = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="pod-delete")

    def close(self) -> None:
        """No more requests: rows waiting for a thread are dropped (the drain hands them back)."""
        self.threads.shutdown(wait=False, cancel_futures=True)

    async def worker(self) -> None:
        loop = asyncio.get_running_loop()
        pipeline = self.pipeline
        while True:
            chunk = [await pipeline.next_work()]
            # With a deep queue, a worker takes a few rows per hand-off to its thread, which sends them
            # one after another: the asyncio-to-thread round trip per row was a good part of the
            # daemon's own CPU per row (bench/README.md). A shallow queue (a single retire) goes alone.
            chunk += pipeline.more_work(min(MAX_CHUNK - 1, pipeline.queued // self.settings.concurrency))
            sendable: list[Work] = []
            for work in chunk:
                if (why := self._unsendable(work.claim)) is not None:
                    self.pipeline.conclude(verdicts.unsendable(work.claim, why))
                    continue
                await self.bucket.acquire()
                if not self._may_send(work):
                    self.pipeline.conclude(self._handed_back(work.claim))
                    continue
                sendable.append(work)
            if sendable:
                sent = await loop.run_in_executor(self.threads, self._send, sendable)
                for work, request in zip(sendable, sent, strict=True):
                    if request is None:  # not sent after all (see _send)
                        self.pipeline.conclude(self._handed_back(work.claim))
                    else:
                        await self._settle(work.claim, request)

    def _unsendable(self, claim: Claim) -> str | None:
        """Why no request may be sent for this row at all, logged and counted; None when it may."""
        why, kind = invalid_name(claim.pod_namespace, claim.pod_name), "invalid_name"
        if why is None:
            why, kind = self.scope.refuses(claim.pod_namespace), "out_of_scope"
        if why is not None:
            logger.error("row {id} is dead, no request sent: {why}", id=claim.id, why=why)
            self.metrics.unsendable.labels(kind).inc()
        return why

    def _handed_back(self, claim: Claim) -> Verdict:
        """A row not sent after all: back uncharged, after its namespace's gate when that is what holds
        it (else at once: the lease ran short, the API server cannot be reached, a 401, the breaker,
        the stop)."""
        if (refusal := self.namespaces.refusal(claim.pod_namespace)) is not None:
            return verdicts.handed_back(claim, delay=refusal.delay, error=refusal.error, http_status=refusal.status)
        return verdicts.handed_back(claim, error=self.outage.reason or self.auth.error or self.breaker.reason)

    def _lease_left(self, work: Work) -> float:
        """Seconds a request for this row may still take, the margin kept before its lease ends."""
        return work.lease_deadline - self._clock() - LEASE_MARGIN_SECONDS

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

    def _send(self, chunk: list[Work]) -> list[Sent | None]:
        """On a pool thread: each row's DELETE (and GET after a 409) in turn. None for a row not sent
        (to be handed back): the lease ran short, Kubernetes refused our credentials or this row's
        namespace, the request before it got no answer at all (the outage watch decides what that means
        before more go out), a gate closed while the chunk waited for its thread, or shutdown began
        while it waited behind the others of its chunk."""
        out: list[Sent | None] = []
        unauthorized = unanswered = False
        forbidden: set[str] = set()  # the gates hear of these only once the chunk is settled
        for i, work in enumerate(chunk):
            claim = work.claim
            if (
                unauthorized
                or unanswered
                or claim.pod_namespace in forbidden
                # Checked again here, the first row too: a gate may have closed while this chunk
                # waited for a free thread (a busy host), and a row found unsendable costs nothing.
                or (i and self.stop.stopping)
                or not self._may_send(work)
            ):
                out.append(None)
                continue
            # delete_pod() may send a DELETE and then a GET: both must end before the lease does.
            timeout = min(self.settings.request_timeout, self._lease_left(work) / 2)
            started_at, sent = datetime.now(UTC), self._timer()
            # Never raises (kube/interface.py): a failure nobody foresaw comes back as `unforeseen`, and
            # the answer table keeps the row through it.
            answer = self.kube.delete_pod(
                claim.pod_namespace,
                claim.pod_name,
                str(claim.pod_uid),
                timeout=timeout,
                dry_run=self._dry_everywhere or claim.pod_namespace in self._dry_namespaces,
            )
            unauthorized = answer.credentials_failed  # the next row would fare no better
            if answer.said is Said.FORBIDDEN:
                forbidden.add(claim.pod_namespace)
            unanswered = answer.said is Said.NO_ANSWER
            # The outage watch judges the request from when it went on the wire, which the client knows
            # (after its credential hook: kube/api.py); a request that never left is judged from here.
            left = sent if answer.left is None else answer.left
            out.append(Sent(started_at, left, self._timer() - sent, answer))
        return out

    async def _settle(self, claim: Claim, sent: Sent) -> None:
        """What came back: the gates hear of it, the answer table says what it means, the pipeline
        gets that, and the metrics, the log and the Event follow from it."""
        self.metrics.delete_latency.observe(sent.seconds)
        self.metrics.answered(sent.answer.label).inc()
        unreachable = await self._outage_hears(sent)
        refusal = self._gates_hear(claim, sent.answer)
        verdict = verdicts.decide(claim, sent, self.policy, unreachable=unreachable, refusal=refusal)
        log_verdict(claim, verdict)
        if self.events is not None and verdict.result is Result.DELETED:
            self.events.deleted(claim)
        failpoints.hit("after_answer")
        self.pipeline.conclude(verdict)

    async def _outage_hears(self, sent: Sent) -> str | None:
        """The outage watch hears of every answer, and judges a request that got none or a 5xx: the
        reason the server is found down, or None."""
        if sent.answer.needs_probe:
            return self.outage.reason if await self.outage.server_down(sent.sent) else None
        if sent.answer.answered:
            self.outage.answered(sent.sent)
        return None

    def _gates_hear(self, claim: Claim, answer: Answer) -> Refusal | None:
        """A 401 closes the auth gate, a 403 the namespace's (their refusal for the row); any answer
        given past authorization opens them again."""
        namespace = claim.pod_namespace
        if answer.credentials_failed:
            refusal = self.auth.refused(answer)
            logger.error(
                "{what}; not claiming for {delay:.0f} s: {error}",
                what="Kubernetes refused our credentials (401)"
                if answer.said is Said.UNAUTHORIZED
                else "no request could be sent: the credential hook failed",
                delay=refusal.delay,
                error=refusal.error,
            )
            return refusal
        if answer.said is Said.FORBIDDEN:
            refusal = self.namespaces.refused(namespace, answer)
            logger.error(
                "Kubernetes refused us in namespace {ns} (403); its rows wait {delay:.0f} s, the others go on: {error}",
                ns=namespace,
                delay=refusal.delay,
                error=refusal.error,
            )
            return refusal
        if answer.past_authorization:
            self.auth.answered()
            if self.namespaces.answered(namespace):
                logger.info("namespace {ns} answers again", ns=namespace)
        return None
