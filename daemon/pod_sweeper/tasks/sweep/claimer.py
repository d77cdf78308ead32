"""The claimer: claims (and re-checks) rows whenever the pipeline has room and something is due.

Then it sleeps until a NOTIFY, the next due time (a backoff ending, a lease expiring) or the poll
interval, whichever comes first. Before it sleeps it arms the wakeup flag, so that retires NOTIFY
(they do not while a sweeper is claiming: migration 0007), and claims once more; only then is it
``asleep`` (what tests wait for before a retire that only a NOTIFY can announce). With gathering on
(``POD_SWEEPER_GATHER_SECONDS``), a turn that took rows is followed by that pause, awake, and a claim
that clears the flag instead: retires under load are taken a pause's worth at a time and, once the
flag is clear, NOTIFY nobody. With the blast-radius breaker on, the cluster's budget and the claim run
in one transaction holding the cluster's breaker row. While the API server cannot be reached (the
outage watch) or refuses the credentials (the auth gate) it claims nothing, and claims at once when the
gate opens.

What the claim itself settles (a generation active again, a re-check that could not be made, a lease
that expired once too often) is the answer table's (``verdicts.at_claim``), recorded in the claim's own
transaction; the rest go to the pipeline only after that transaction has committed, so no DELETE ever
runs inside a transaction. A claim that finds one host transaction too large for the breaker's
transaction rule is rolled back and trips the breaker instead. A database error is retried with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from loguru import logger

from pod_sweeper.core import failpoints
from pod_sweeper.core.errors import first_line
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.store.interface import StoreError, SweepSession, SweepStore
from pod_sweeper.store.rows import Arming, Claim, ClaimedBatch, LargeTransaction, Verdict
from pod_sweeper.store.sweep.recheck import Recheck
from pod_sweeper.tasks.loops.outage import OutageWatch
from pod_sweeper.tasks.rules import verdicts
from pod_sweeper.tasks.rules.gates import AuthGate, BreakerGate, SchemaGate, breaker_budget, trip_reason
from pod_sweeper.tasks.rules.surge import SurgeRules, transaction_reason
from pod_sweeper.tasks.rules.verdicts import Policy
from pod_sweeper.tasks.sweep.pipeline import Pipeline
from pod_sweeper.tasks.sweep.report import log_verdict
from pod_sweeper.tasks.sweep.stop import Phase, StopOrder

# The shortest sleep between claims when rows are due but all locked by other replicas.
MIN_CLAIM_PAUSE = 0.05
# While an open retire keeps the wakeup flag from being armed, claim again after this pause, doubling
# up to the cap: the wake latency while writers keep the flag busy (a NOTIFY-free stream of retires).
ARM_RETRY_MIN = 0.002
ARM_RETRY_MAX = 0.05
# A replica holding more rows without an answer than it can send in HAND_ON_SECONDS (at its rate limit,
# and never more than its concurrency) is saturated: it hands its wakeups on to the others and claims
# no more until it is not. One retire wakes one replica (migration 0018); at the shipped rate limit,
# 50 requests a second, the one woken for every retire of 100 a second fell seconds behind.
HAND_ON_SECONDS = 0.2


@dataclass(frozen=True)
class Turn:
    """What one turn's transaction found: the claim, and when it took fewer rows than it asked for, the
    next due time (seconds; None: nothing open within the poll) and what arming the flag found (None:
    not armed this turn, after arming or without a listener), or instead how long to gather."""

    batch: ClaimedBatch
    due: float | None = None
    arming: Arming | None = None
    gather: float = 0.0  # took rows while gathering is on: claim again this many seconds later


class Claimer:
    def __init__(
        self,
        settings: Settings,
        store: SweepStore,
        pipeline: Pipeline,
        metrics: Metrics,
        *,
        policy: Policy,
        auth: AuthGate,
        breaker: BreakerGate,
        outage: OutageWatch,
        stop: StopOrder,
        schema: SchemaGate,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.store, self.pipeline, self.metrics, self.policy = settings, store, pipeline, metrics, policy
        self.auth, self.breaker, self.outage, self.stop = auth, breaker, outage, stop
        self.schema = schema
        self.rules = SurgeRules.of(settings)  # the transaction rule, which each claim applies
        self._clock = clock  # the leases' clock (the sender measures what is left of them on it too)
        self._db_backoff = policy.backoff
        self.wake = asyncio.Event()
        self.wake_source = "start"
        self.last_turn = clock()  # the claimer's heartbeat, for the systemd watchdog
        # Waiting out a closed gate (the API server unreachable, a 401) on purpose: the heartbeat stands
        # still, and a restart would cure nothing, so the watchdog must not count it as a stall.
        self.gated = False
        # Set just before the claimer sleeps with nothing due and, when it listens, the wakeup flag armed
        # and claimed past: from then on a retire reaches it by NOTIFY. Cleared as it wakes.
        self.asleep = asyncio.Event()
        self.first_claim_done = asyncio.Event()  # the start-up catch-up claim ran (readiness waits on it)
        rate, concurrency = settings.rate_limit_qps, settings.concurrency
        self.saturation = max(1, min(concurrency, int(rate * HAND_ON_SECONDS))) if rate else concurrency
        self._handed_on = False  # this saturation's hand-on is done
        # A poll, the start or a new LISTEN found rows nobody had claimed: take the wakeup flag over at
        # the next arming, however many turns that is away (a full batch, a lock that is busy).
        self._take_over = False
        # Set by every turn that took rows: retires may be arriving, so the breaker's surge watch, which
        # sleeps through a quiet cluster, looks again at once. Not by the wakeup itself: the claim it
        # makes judges one large host transaction first (the transaction rule, which holds only what
        # that transaction retired), and the surge watch, a spread of them, right after.
        self.activity = asyncio.Event()

    def notify(self, source: str) -> None:
        """Wake the claimer (a NOTIFY arrived, the listener reconnected, a retry fell due, ...)."""
        self.wake_source = source
        self.wake.set()

    def leave(self) -> None:
        """The stop: out of any sleep at once, the claimer leaves at the end of its turn. A claim in flight
        is let come back (its rows are then handed back), never cancelled: see Sweeper.drain."""
        self.wake.set()

    def _at_claim(self, claim: Claim, recheck: Recheck) -> Verdict | None:
        return verdicts.at_claim(claim, recheck, self.policy)

    async def run(self) -> None:
        db_failures = 0
        just_armed = False  # the next claim is the one after arming: it must not clear the flag
        gathering = False  # the last turn gathered: this one clears the wakeup flag (sql/claim.sql)
        arm_retry = ARM_RETRY_MIN
        pipeline, settings = self.pipeline, self.settings
        while not self.stop.stopping:
            self.last_turn = self._clock()
            if not self.outage.open or not self.auth.open or not self.schema.open:
                await self._wait_out_the_gates()
                continue
            if settings.listens and len(pipeline.awaiting_answers()) > self.saturation:
                await self._saturated()
                continue
            self._handed_on = False
            room = pipeline.free
            # Claim when the workers may run dry, or a whole batch fits: claiming whatever room each
            # record freed made claims of about 5 rows in a drain, a claim and a re-check per 5 rows.
            if room <= 0 or (pipeline.queued > settings.concurrency and room < settings.batch_size):
                await pipeline.wait_for_room()
                continue
            want = min(settings.batch_size, room)
            self.wake.clear()  # before the claim: a NOTIFY during it must wake the next sleep
            # Not woken by a NOTIFY (a poll, a due time, the start, a new LISTEN) and rows were there to
            # take: the replica the wakeup flag names may not have claimed them (it stopped, crashed or
            # lost its listener), so this one takes the flag over when it next arms it (sql/arm.sql). A
            # live named replica loses nothing by it but one write of the flag's row.
            polled, self.wake_source = self.wake_source not in ("notify", "retry", "claim"), "claim"
            started = self._clock()
            try:
                # A poll-only replica cannot hear NOTIFY, so it neither arms nor clears the flag: clearing
                # it would silence the retires for listening replicas.
                listening = settings.listens and not just_armed
                turn = await self._turn(want, disarm=listening, arm=listening, polled=polled, gathering=gathering)
            except StoreError as exc:
                db_failures += 1
                self.metrics.db_errors.inc()
                delay = self._db_backoff.delay(db_failures)
                logger.warning("claim failed, retrying in {delay:.1f} s: {error}", delay=delay, error=first_line(exc))
                await self._sleep_until_stop(delay)
                continue
            db_failures = 0
            just_armed, gathering = False, False
            self.first_claim_done.set()
            if turn is None:  # the breaker holds deletes back: look again at the next wake or poll
                await self._sleep_until_wake(settings.poll_interval)
                continue
            batch = turn.batch
            self._count(batch)
            if self.stop.stopping:  # answered after the stop began: nothing of it is sent
                for claim in batch.to_send:
                    pipeline.conclude(verdicts.handed_back(claim))
                return
            if batch.to_send:
                failpoints.hit("after_claim")
            pipeline.add(batch.to_send, started + settings.lease_seconds)
            if batch.taken:
                arm_retry = ARM_RETRY_MIN
                self.activity.set()
                self._take_over = self._take_over or polled
            if batch.taken >= want:
                continue  # a full batch: there may be more right now
            if turn.gather:
                # POD_SWEEPER_GATHER_SECONDS: awake, claiming again after the pause, and that claim
                # clears the wakeup flag if it takes a row, so the retires after it wait in the outbox
                # for the next and NOTIFY nobody (each NOTIFY is a transaction of every listener's).
                gathering = True
                await self._sleep_until_stop(turn.gather)
                continue
            pause = settings.poll_interval if turn.due is None else min(settings.poll_interval, max(turn.due, 0.0))
            # No longer than the next discovery: rows below the claim cursor's floor (a pause's, a long
            # host transaction's) are found by it, not by the next poll.
            if (rediscover := self.store.rediscover_in()) is not None:
                pause = min(pause, rediscover)
            pause = max(pause, MIN_CLAIM_PAUSE)
            arming = await self._arm() if turn.arming is Arming.NEEDED else turn.arming
            if arming in (Arming.ARMED, Arming.ALREADY):
                self._take_over = False
            if arming is Arming.ARMED:
                just_armed = True
                continue  # claim once more: what committed before the arming was not announced
            if arming is Arming.DEFERRED:
                self.metrics.arm_deferred.inc()
                pause, arm_retry = min(pause, arm_retry), min(arm_retry * 2, ARM_RETRY_MAX)
                await self._sleep_until_wake(pause)
                continue
            self.asleep.set()
            try:
                await self._sleep_until_wake(pause, backstop=pause >= settings.poll_interval)
            finally:
                self.asleep.clear()

    async def _saturated(self) -> None:
        """More rows in hand than this replica can send soon: the wakeups go to every replica (the flag
        no longer names this one: ``hand_on``), and this one claims nothing until rows are let go.
        Rows it would take now would wait here, behind its rate limit, while the others sleep."""
        if not self._handed_on:
            self._handed_on = True
            self.metrics.handed_on.inc()
            try:
                async with self.store.session() as session:
                    await session.hand_on()
            except StoreError as exc:  # the others find the rows at their poll
                logger.warning("could not hand the wakeups on: {error}", error=first_line(exc))
        # Looked at again after the hand-on's round trip, in which every row may have been let go:
        # wait_for_room would then wait for a write that never comes. No await from here to its wait.
        if len(self.pipeline.awaiting_answers()) > self.saturation:
            await self.pipeline.wait_for_room()  # the stop opens it too (Pipeline.stop_claiming)

    async def _turn(self, want: int, *, disarm: bool, arm: bool, polled: bool, gathering: bool) -> Turn | None:
        """One turn's statements in one transaction: the breaker's budget, the claim of up to ``want`` rows
        and, unless it took them all, the next due time with the wakeup flag as it is (with ``arm``:
        ``ALREADY`` armed in a replica's name, or ``NEEDED``: the caller arms it after the commit, in a
        statement of its own, since arming takes the lock every retire queues behind). None when the breaker
        allows no row. One commit a turn: every statement of a transaction of its own cost the primary a
        commit each, seven a turn, and at 100 retires a second with three replicas eleven transactions a
        retire (bench ``cost``). Whatever fails, all of it rolls back together: the claimed rows stay as
        they were, uncharged. The rows go to the pipeline only after the commit, so no DELETE runs inside
        it; the next due read adds a fraction of a millisecond before that. (The verdicts waiting were
        written here too, once: a transaction fewer a retire, but half a millisecond more before each DELETE
        of a quiet system; the recorder's longer linger saves the same transactions off that path.)
        With ``gathering``, the claim clears the wakeup flag if it takes a row. With gathering on
        (``gather_seconds``), a turn that took rows (a listening replica's: a poll-only one neither arms
        nor clears the flag) reads the flag as nothing to arm: it gathers instead (``Turn.gather``)."""
        guard = self.settings.guard_standbys
        if guard is not None:  # its own short transaction, before the claim's: see sql/guard_mark.sql
            async with self.store.session() as session:
                await session.guard_mark()
        turn: Turn | None = None
        async with self.store.session() as session:
            try:
                async with session.transaction():
                    want = await self._breaker_budget(session, want)
                    if want > 0:
                        batch = await session.claim(
                            batch=want,
                            lease_seconds=self.settings.lease_seconds,
                            disarm=disarm,
                            at_claim=self._at_claim,
                            guard=guard,
                            transaction_rows=self.rules.transaction_rows,
                            gathering=gathering,
                        )
                        turn = Turn(batch)
                        if batch.taken < want:
                            # Gathering (a listening replica's, after taking rows) arms nothing; the next due
                            # time is read all the same: it moves the claim cursor's floor (store/sweep/cursor.py),
                            # and a stream gathered for hours under a pinned horizon would claim from where the
                            # last sleep left it.
                            gather = self.settings.gather_seconds if arm and batch.taken else 0.0
                            take_over = self._take_over or (polled and batch.taken > 0)
                            due, arming = await session.look_ahead(arm=arm and not gather, take_over=take_over)
                            turn = Turn(batch, due, arming, gather)
            except LargeTransaction as large:  # the claim was rolled back: nothing of it is sent
                await self._keep_back(session, large)
                # Claim again at once: the transaction's rows are kept back now, every other row goes on.
                turn = Turn(ClaimedBatch([], [], {}), due=0.0)
        return turn

    async def _keep_back(self, session: SweepSession, large: LargeTransaction) -> None:
        """The breaker's transaction rule holds the large transaction, not the cluster: its rows are kept
        back as one batch until an on-call releases or discards them; the log says which."""
        reason = transaction_reason(large.size, self.rules, self.settings.cluster)
        kept = await session.keep_back_transaction(large.at, large.size, reason)
        self.metrics.large_transactions.inc()
        logger.critical(
            "large host transaction kept back, its rows are not sent (the cluster's other rows are): {reason}; "
            "transaction {id}, begun {at}",
            reason=reason,
            id="recorded by another replica" if kept is None else kept,
            at=large.at.isoformat(timespec="milliseconds"),
        )

    def _count(self, batch: ClaimedBatch) -> None:
        """The metrics and the log of a claim: rows taken, and those the claim itself ended."""
        self.metrics.claimed.inc(batch.taken)
        for claim, verdict in batch.decided:
            self.metrics.recorded(verdict.result)
            log_verdict(claim, verdict)

    async def _wait_out_the_gates(self) -> None:
        """Claim nothing while the API server cannot be reached (until the outage watch opens its gate),
        refuses the credentials (until the auth gate's backoff ends) or the schema is one this release
        may not run on (until the schema watch finds it fit again), or until the stop."""
        self.gated = True
        try:
            if not self.schema.open:
                await _first_of(self.schema.opened.wait(), self.stop.wait(Phase.CLAIMS_STOPPED))
            elif not self.outage.open:
                await _first_of(self.outage.opened.wait(), self.stop.wait(Phase.CLAIMS_STOPPED))
            else:
                await self._sleep_until_stop(self.auth.wait())
        finally:
            self.gated = False

    async def _arm(self) -> Arming:
        """Arm the wakeup flag in this replica's name (taking it over when ``_take_over``), in a
        statement of its own; ``DEFERRED`` when the database failed too (the claim that follows says why)."""
        try:
            async with self.store.session() as session:
                return await session.arm(take_over=self._take_over)
        except StoreError:
            return Arming.DEFERRED

    async def _sleep_until_wake(self, timeout: float, *, backstop: bool = False) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), timeout)
            if not self.stop.stopping:  # the stop is not a wakeup (Claimer.leave)
                self.metrics.wakeups.labels(self.wake_source).inc()
            return
        self.wake_source = "poll" if backstop else "due"  # the backstop poll, or a due time of its own
        self.metrics.wakeups.labels("poll").inc()

    async def _sleep_until_stop(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(Phase.CLAIMS_STOPPED), seconds)

    async def _trip(self, session: SweepSession, reason: str) -> None:
        """Trip the cluster's breaker for ``reason``: its row, this replica's gate, the log."""
        await session.trip_breaker(reason)
        self.breaker.observe(reason)
        logger.critical("blast-radius breaker tripped, no more deletes: {reason}", reason=reason)

    async def _breaker_budget(self, session: SweepSession, want: int) -> int:
        """How many rows this claim may take under the cluster's blast-radius breaker (0: none; tripped, by
        any of its rules, or the ceiling's minute spent). The ceiling counts the cluster's deletes by every
        replica, from the attempt history; the surge and transaction rules trip it from the surge watch."""
        limit, cluster = self.settings.max_deletes_per_minute, self.settings.cluster
        if not self.settings.breaker_on:
            return want
        if not limit:  # the rules alone: one row read by its key, no lock, no count of the minute's deletes
            tripped = await session.breaker_tripped()
            self.breaker.observe(tripped)
            return 0 if tripped is not None else want
        window = await session.breaker_window()
        self.breaker.observe(window.tripped_reason)
        if (budget := breaker_budget(limit, window, want)) > 0 or window.tripped_reason is not None or not limit:
            return budget
        due = await session.next_due()
        if due is not None and due <= 0:  # work is waiting, and the minute's deletes are spent: trip
            reason = trip_reason(limit, window, cluster)
            await self._trip(session, reason)
        return 0


async def _first_of(*waits: Coroutine[Any, Any, object]) -> None:
    """Until the first of these is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
