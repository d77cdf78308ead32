"""The sweeper loop: claim rows, delete their pods, record how each ended.

Three kinds of task share one in-memory pipeline:

- the *claimer* claims (and re-checks) rows whenever there is room in the pipeline and something is
  due, then sleeps until a NOTIFY, the next due time (a backoff ending, a lease expiring) or the poll
  interval, whichever comes first. Before it sleeps it arms the wakeup flag, so that retires NOTIFY
  (they do not while a sweeper is claiming: migration 0007), and claims once more;
- *workers*, ``concurrency`` of them, each send one DELETE at a time on a thread pool (the official
  client is synchronous), paced by the token bucket and never with a timeout that outlasts the lease;
  when the queue is deep a worker hands its thread a few rows at once, sent one after another;
- the *finalizer* records results in batches (lingering a few ms for more), fenced on the claim epoch.

The pipeline holds at most ``concurrency`` rows in flight plus one claim batch waiting, so a claimed
row waits seconds, not its whole lease, before its DELETE. Database errors in the claimer or the
finalizer are retried with backoff; results are kept in memory until they are recorded (if the process
dies first, the lease expires and another replica repeats the DELETE, which the UID precondition makes
harmless: it answers 404 and the row ends ``absent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import failpoints
from pod_sweeper.core.backoff import Backoff, TokenBucket
from pod_sweeper.core.errors import KubeError, KubeUnauthorized, first_line
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.kube.api import Answer, PodDeleter, invalid_name
from pod_sweeper.store import outbox, queries
from pod_sweeper.store.db import Connection
from pod_sweeper.store.outbox import Attempt, Claim, Final
from pod_sweeper.store.recheck import Attachment
from pod_sweeper.tasks import outcomes
from pod_sweeper.tasks.gates import AuthGate, breaker_budget, trip_reason
from pod_sweeper.tasks.outcomes import Decision, Verdict

# A DELETE is not sent with less than this much of the lease left; the row is handed back instead.
MIN_REQUEST_SECONDS = 1.0
# Margin kept between the end of a request's timeout and the end of the lease.
LEASE_MARGIN_SECONDS = 2.0
# The shortest sleep between claims when rows are due but all locked by other replicas.
MIN_CLAIM_PAUSE = 0.05
# While an open retire keeps the wakeup flag from being armed, claim again after this pause, doubling
# up to the cap: the wake latency while writers keep the flag busy (a NOTIFY-free stream of retires).
ARM_RETRY_MIN = 0.002
ARM_RETRY_MAX = 0.05
FINALIZE_BATCH = 500
# With fewer results than FINALIZE_GATHER waiting, the finalizer waits FINALIZE_LINGER seconds for
# more before writing. Nothing waits on a result being written but the row's lease (and the room it
# frees for claims), so a few ms are free.
FINALIZE_GATHER = 50
FINALIZE_LINGER = 0.025
# At most this many rows per hand-off from a worker to its thread (see Sweeper.worker).
MAX_CHUNK = 8
# A terminating pod is looked at again this long after its grace period ends (kubelet needs a moment).


@dataclass(frozen=True)
class _Request:
    """One row's request as the pool thread saw it: when it started, how long it took, how it ended."""

    started_at: datetime
    seconds: float
    result: Answer | Exception


@dataclass
class _Work:
    claim: Claim
    lease_deadline: float  # time.monotonic() by which the lease ends, measured before the claim


class Sweeper:
    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Connection],
        deleter: PodDeleter,
        *,
        attachments: dict[int, Attachment],
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.deleter = deleter
        self.attachments = attachments
        self.metrics = metrics or Metrics()
        self.wake = asyncio.Event()
        self.wake_source = "start"
        self.backoff = Backoff(settings.backoff_base, settings.backoff_max)
        self.bucket = TokenBucket(settings.rate_limit_qps, settings.rate_limit_burst)
        # Rows held at once: one batch queued behind the deletes in flight, so the workers never wait
        # for a claim round trip. (Capping the queue at `concurrency` made claims small and frequent:
        # the drain ran at 0.54 of the client's ceiling, 0.76 with this; bench/README.md.) A queued
        # row whose lease runs short before a worker reaches it is handed back, not sent.
        self.capacity = settings.concurrency + settings.batch_size
        self.auth = AuthGate(self.backoff, floor=settings.backoff_base)  # the 401/403 circuit
        self.last_turn = time.monotonic()  # the claimer's heartbeat, for the systemd watchdog
        self.breaker_reason: str | None = None  # set while the blast-radius breaker is tripped
        self.first_claim_done = asyncio.Event()  # the start-up catch-up claim ran (readiness waits on it)
        self._queue: asyncio.Queue[_Work] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []  # claimer, finalizer and workers, once run() starts
        self._inflight: dict[int, Claim] = {}
        self._results: list[Final] = []
        self._results_ready = asyncio.Event()
        self._settled = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._room = asyncio.Event()
        self._stopping = asyncio.Event()
        # Labelled counters looked up once per label value, not once per row.
        self._answered = functools.cache(self.metrics.kube_responses.labels)
        self._finished = functools.cache(self.metrics.outcomes.labels)
        self._executor = ThreadPoolExecutor(max_workers=settings.concurrency, thread_name_prefix="pod-delete")

    # --- wakeups -----------------------------------------------------------------------------------

    def notify(self, source: str) -> None:
        """Wake the claimer (a NOTIFY arrived, the listener reconnected, ...)."""
        self.wake_source = source
        self.wake.set()

    async def _sleep_until_wake(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), timeout)
            self.metrics.wakeups.labels(self.wake_source).inc()
            return
        self.metrics.wakeups.labels("poll").inc()

    # --- claimer ------------------------------------------------------------------------------------

    async def claimer(self) -> None:
        db_failures = 0
        just_armed = False  # the next claim is the one after arming: it must not clear the flag
        arm_retry = ARM_RETRY_MIN
        while not self._stopping.is_set():
            self.last_turn = time.monotonic()
            if not self.auth.open:
                await self._sleep_until_stop(self.auth.wait())
                continue
            room = self.capacity - len(self._inflight)
            # Claim when the workers may run dry, or a whole batch fits: claiming whatever room each
            # finalize freed made claims of about 5 rows in a drain, a claim and a re-check per 5 rows.
            if room <= 0 or (self._queue.qsize() > self.settings.concurrency and room < self.settings.batch_size):
                self._room.clear()
                await self._room.wait()
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
                self._finished("skipped_active").inc(result.skipped)
            self.metrics.claimed.inc(got)
            if result.to_delete:
                failpoints.hit("after_claim")
            deadline = started + self.settings.lease_seconds
            for claim in result.to_delete:
                self._inflight[claim.id] = claim
                self._queue.put_nowait(_Work(claim, deadline))
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
                return await outbox.next_due(conn)
        except psycopg.Error:
            return None

    async def _arm(self) -> bool:
        """Arm the wakeup flag before sleeping; False when it cannot be armed now (or the database
        failed: then the claim that follows reports it)."""
        try:
            async with self.pool.connection() as conn:
                if await outbox.arm(conn, self.settings.replica_id):
                    return True
        except psycopg.Error:
            return False
        self.metrics.arm_deferred.inc()
        return False

    @contextlib.asynccontextmanager
    async def _breaker_section(self, conn: Connection) -> AsyncIterator[None]:
        """With the breaker on, the budget and the claim run in one transaction under an advisory
        lock (the claim's own transaction becomes a savepoint); with it off, nothing."""
        if not self.settings.max_deletes_per_minute:
            yield
            return
        async with conn.transaction():
            await conn.execute(queries.load("advisory_lock"), {"key": queries.Lock.BREAKER})
            yield

    async def _breaker_budget(self, conn: Connection, want: int) -> int:
        """How many rows this claim may take under the blast-radius breaker (0: none; tripped or
        the minute's budget spent). Counts every replica's deletes, from the attempt history."""
        limit = self.settings.max_deletes_per_minute
        if not limit:
            return want
        window = await outbox.breaker_window(conn)
        self.breaker_reason = window.tripped_reason
        if (budget := breaker_budget(limit, window, want)) > 0 or window.tripped_reason is not None:
            return budget
        due = await outbox.next_due(conn)
        if due is not None and due <= 0:  # work is waiting, and the minute's deletes are spent: trip
            reason = trip_reason(limit, window)
            await outbox.trip_breaker(conn, reason, self.settings.replica_id)
            self.breaker_reason = reason
            logger.critical("blast-radius breaker tripped, no more deletes: {reason}", reason=reason)
        return 0

    async def _sleep_until_stop(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    # --- workers ------------------------------------------------------------------------------------

    async def worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            chunk = [await self._queue.get()]
            # With a deep queue, a worker takes a few rows per hand-off to its thread, which sends them
            # one after another: the asyncio-to-thread round trip per row was a good part of the
            # daemon's own CPU per row (bench/README.md). A shallow queue (a single retire) goes alone.
            for _ in range(min(MAX_CHUNK - 1, self._queue.qsize() // self.settings.concurrency)):
                chunk.append(self._queue.get_nowait())
            sendable: list[_Work] = []
            for work in chunk:
                claim = work.claim
                bad_name = invalid_name(claim.pod_namespace, claim.pod_name)
                if bad_name is not None:
                    logger.error("row {id} is dead: {why}", id=claim.id, why=bad_name)
                    self._record(Final.dead(claim, bad_name))
                    continue
                await self.bucket.acquire()
                if not self._may_send(work):
                    self._record(Final.hand_back(claim, error=self.auth.error or self.breaker_reason))
                    continue
                sendable.append(work)
            if sendable:
                sent = await loop.run_in_executor(self._executor, self._send, sendable)
                for work, request in zip(sendable, sent, strict=True):
                    self._settle(work.claim, request)

    @staticmethod
    def _lease_left(work: _Work) -> float:
        """Seconds a request for this row may still take, the margin kept before its lease ends."""
        return work.lease_deadline - time.monotonic() - LEASE_MARGIN_SECONDS

    def _may_send(self, work: _Work) -> bool:
        """Whether a DELETE for this row may start now (enough lease left, not refused, breaker closed)."""
        return self._lease_left(work) >= MIN_REQUEST_SECONDS and self.auth.open and not self.breaker_reason

    def _send(self, chunk: list[_Work]) -> list[_Request | None]:
        """On a pool thread: each row's DELETE (and GET after a 409) in turn. None for a row not sent
        (to be handed back): the lease ran short, Kubernetes refused us, or shutdown began while it
        waited behind the others of its chunk."""
        out: list[_Request | None] = []
        refused = False
        for i, work in enumerate(chunk):
            if refused or (i and (self._stopping.is_set() or not self._may_send(work))):
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
                refused = isinstance(exc, KubeUnauthorized)
            out.append(_Request(started_at, time.monotonic() - sent, result))
        return out

    def _settle(self, claim: Claim, request: _Request | None) -> None:
        """Record how one row's request ended (see the outcome table in docs/design.md)."""
        if request is None:
            self._record(Final.hand_back(claim, error=self.auth.error or self.breaker_reason))
            return
        result = request.result
        self.metrics.delete_latency.observe(request.seconds)
        self._answered(outcomes.answer_label(result)).inc()
        decision = outcomes.decide(
            result, attempts=claim.attempts, max_attempts=self.settings.max_attempts, backoff=self.backoff
        )
        attempt = Attempt(request.started_at, request.seconds * 1000, decision.reason)
        if isinstance(result, Exception) and not isinstance(result, KubeError):  # a bug, or nobody foresaw it
            logger.opt(exception=result).error("unexpected error deleting row {id}", id=claim.id)
        if decision.verdict is Verdict.DONE:
            assert decision.outcome is not None
            self.auth.answered()
            final = Final.done(claim, decision.outcome, decision.http_status, attempt)
            self._record(dataclasses.replace(final, confirm_in=decision.confirm_in) if decision.confirm_in else final)
        elif decision.verdict is Verdict.REFUSED:
            assert isinstance(result, KubeUnauthorized)
            self._auth_refused(claim, result, attempt)
        elif decision.verdict is Verdict.DEAD:
            self._log_dead(claim, decision)
            self._record(Final.dead(claim, decision.error or "", decision.http_status, attempt))
        else:
            logger.info(
                "row {id} will be retried in {delay:.1f} s: {error}",
                id=claim.id,
                delay=decision.delay,
                error=decision.error,
            )
            self._record(Final.retry(claim, decision.delay, decision.error or "", decision.http_status, attempt))

    def _log_dead(self, claim: Claim, decision: Decision) -> None:
        if not decision.exhausted:
            logger.error(
                "DELETE {ns}/{pod} rejected, row {id} is dead: {error}",
                ns=claim.pod_namespace,
                pod=claim.pod_name,
                id=claim.id,
                error=decision.error,
            )
            return
        logger.error(
            "row {id} ({ns}/{pod}) is dead after {n} attempts: {error}",
            id=claim.id,
            ns=claim.pod_namespace,
            pod=claim.pod_name,
            n=claim.attempts,
            error=decision.error,
        )

    def _auth_refused(self, claim: Claim, exc: KubeUnauthorized, attempt: Attempt) -> None:
        # A fault of the daemon, not of the row: charge nothing, stop claiming for a while, say why.
        delay = self.auth.refused(exc.status, str(exc), claim.pod_namespace)
        logger.error(
            "Kubernetes refused us ({status}); not claiming for {delay:.0f} s: {error}",
            status=exc.status,
            delay=delay,
            error=self.auth.error,
        )
        self._record(
            Final.hand_back(claim, error=self.auth.error, delay=delay, http_status=exc.status, attempt=attempt)
        )

    def _record(self, final: Final) -> None:
        if final.attempt is not None:
            failpoints.hit("after_answer")
        self._results.append(final)
        self._results_ready.set()
        self._settled.set()

    # --- finalizer ----------------------------------------------------------------------------------

    async def finalizer(self) -> None:
        failures = 0
        while True:
            await self._results_ready.wait()
            if len(self._results) < FINALIZE_GATHER and not self._stopping.is_set():
                # Let results gather for a moment: written as they came (about 7 rows a statement in
                # a drain), the statement's own cost per row outweighed the row's (bench/README.md).
                await asyncio.sleep(FINALIZE_LINGER)
            try:
                await self._flush()
                failures = 0
            except psycopg.Error as exc:
                failures += 1
                self.metrics.db_errors.inc()
                delay = self.backoff.delay(failures)
                logger.warning(
                    "recording {n} result(s) failed, retrying in {delay:.1f} s: {error}",
                    n=len(self._results),
                    delay=delay,
                    error=first_line(exc),
                )
                await asyncio.sleep(delay)

    async def _flush(self) -> None:
        # The finalizer task and the shutdown drain both flush; one at a time, or the same results
        # would be written (and removed from the list) twice.
        async with self._flush_lock:
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        while self._results:
            batch = self._results[:FINALIZE_BATCH]
            async with self.pool.connection() as conn, conn.transaction():
                owned = await outbox.finalize(conn, batch, self.settings.replica_id)
                failpoints.hit("during_finalize")
            del self._results[: len(batch)]
            for final in batch:
                self._inflight.pop(final.id, None)
                if final.id not in owned:
                    self.metrics.fenced.inc()
                    logger.warning(
                        "row {id}: lease lost before its result was recorded; another replica owns it", id=final.id
                    )
                elif final.status == "done" and final.outcome:
                    self._finished(final.outcome).inc()
                elif final.status == "dead":
                    self.metrics.dead.inc()
                elif final.refund:
                    self.metrics.handed_back.inc()
                else:
                    self.metrics.retries.inc()
            self._room.set()
            if any(f.status == "pending" for f in batch):
                # A retry's due time is likely earlier than what the claimer is sleeping towards (the
                # lease it held): wake it so it plans its sleep again.
                self.notify("retry")
        self._results_ready.clear()

    # --- the whole loop, and its graceful end ---------------------------------------------------------

    async def run(self) -> None:
        """Claimer, workers and finalizer in one task group: any one dying stops the others."""
        async with asyncio.TaskGroup() as group:
            self._tasks = [
                group.create_task(self.claimer(), name="claimer"),
                group.create_task(self.finalizer(), name="finalizer"),
            ]
            self._tasks += [
                group.create_task(self.worker(), name=f"worker-{i}") for i in range(self.settings.concurrency)
            ]

    async def drain(self, deadline: float) -> None:
        """Stop claiming, let in-flight deletes finish until ``deadline`` (monotonic), hand back the
        rest without charging an attempt, record everything, and stop the tasks."""
        self._stopping.set()
        self._room.set()
        while not self._queue.empty():  # claimed but not started: back to pending at once
            self._record(Final.hand_back(self._queue.get_nowait().claim))
        # Each result sets _settled; wait until every row in flight has one, or the deadline.
        while self._awaiting_answers() and time.monotonic() < deadline:
            self._settled.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), deadline - time.monotonic())
        for task in self._tasks:
            if task.get_name() != "finalizer":
                task.cancel()
        for claim in self._awaiting_answers():  # still at the API after the deadline
            self._record(Final.hand_back(claim))
        try:
            await asyncio.wait_for(self._flush(), max(1.0, deadline - time.monotonic()))
        except (psycopg.Error, TimeoutError) as exc:
            logger.error(
                "could not record {n} result(s) at shutdown; their leases will expire: {error}",
                n=len(self._results),
                error=first_line(exc),
            )
        await self._wake_the_others()
        for task in self._tasks:
            task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _awaiting_answers(self) -> list[Claim]:
        """The rows in flight whose request has no result yet (still at the API)."""
        recorded = {f.id for f in self._results}
        return [claim for claim in self._inflight.values() if claim.id not in recorded]

    async def _wake_the_others(self) -> None:
        # This replica may have cleared the wakeup flag (it was claiming) and is leaving: retires do not
        # NOTIFY now, and the other replicas sleep. One NOTIFY makes them claim, and arm it themselves.
        try:
            async with asyncio.timeout(2), self.pool.connection() as conn:
                await conn.execute(queries.load("notify"), queries.notify_params())
        except (psycopg.Error, TimeoutError) as exc:
            logger.warning("could not wake the other replicas on the way out: {error}", error=first_line(exc))
