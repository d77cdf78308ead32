"""The sweeper: claim rows, delete their pods, record how each ended, in three kinds of task.

- the claimer (``claimer.Claimer``) claims and re-checks rows whenever the pipeline has room and
  something is due, and sleeps until a NOTIFY, the next due time or the poll;
- ``concurrency`` workers (``sender.Sender``) send each row's DELETE under its UID precondition and
  apply what the answer table (``verdicts.decide``) says it means for the row;
- the recorder (``recorder.Recorder``) writes the results in batches, fenced on the claim epoch.

This class makes the pieces and hands each task what it needs and nothing else: the
``pipeline.Pipeline`` they pass rows through, the gates (``gates.AuthGate``, ``gates.NamespaceGates``,
``gates.BreakerGate``, each owning its state and its gauge), the ``verdicts.Policy``. It runs them in one
task group (any one dying stops the others), exposes their state read-only (``SweeperStatus``) and ends
them gracefully (``drain``): no new claims, in-flight deletes get until a deadline, the rest go back
uncharged, each step a phase of the one ``stop.StopOrder`` the tasks obey.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable

from loguru import logger

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.errors import first_line
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.kube.interface import SweepKube
from pod_sweeper.store.interface import StoreError, SweepStore
from pod_sweeper.tasks.loops.events import EventSender
from pod_sweeper.tasks.loops.outage import OutageWatch
from pod_sweeper.tasks.rules import verdicts
from pod_sweeper.tasks.rules.gates import AuthGate, BreakerGate, NamespaceGates, SchemaGate
from pod_sweeper.tasks.rules.verdicts import Policy
from pod_sweeper.tasks.sweep.claimer import Claimer
from pod_sweeper.tasks.sweep.pipeline import Pipeline
from pod_sweeper.tasks.sweep.recorder import Recorder
from pod_sweeper.tasks.sweep.sender import Sender
from pod_sweeper.tasks.sweep.stop import Phase, StopOrder


class SweeperStatus:
    """One sweeper's state, read-only and read where it lives: what the process (readiness, the systemd
    watchdog and STATUS line) and the tests look at, instead of reaching into the tasks."""

    def __init__(
        self,
        claimer: Claimer,
        auth: AuthGate,
        namespaces: NamespaceGates,
        breaker: BreakerGate,
    ) -> None:
        self._claimer, self._auth, self._namespaces, self._breaker = claimer, auth, namespaces, breaker

    @property
    def asleep(self) -> bool:
        """The claimer sleeps with nothing due, the wakeup flag armed when it listens: a retire now
        reaches it by NOTIFY (or, poll-only, at the next poll)."""
        return self._claimer.asleep.is_set()

    @property
    def gated(self) -> bool:
        """The claimer waits for a closed gate on purpose (the API server unreachable, a 401)."""
        return self._claimer.gated

    @property
    def last_turn(self) -> float:
        """When the claimer's loop last turned (monotonic): its heartbeat."""
        return self._claimer.last_turn

    @property
    def breaker(self) -> str | None:
        """Why the cluster's blast-radius breaker holds deletes back; None while it does not."""
        return self._breaker.reason

    @property
    def refusing(self) -> str | None:
        """Why Kubernetes refuses the credentials (401); None while it does not."""
        return self._auth.refusing

    @property
    def refused_namespaces(self) -> dict[str, str]:
        """The namespaces Kubernetes answers 403 in (and has not answered otherwise since), with why."""
        return self._namespaces.refusing()


class Sweeper:
    def __init__(
        self,
        settings: Settings,
        store: SweepStore,
        kube: SweepKube,
        *,
        outage: OutageWatch,
        metrics: Metrics,
        schema: SchemaGate | None = None,
        breaker: BreakerGate | None = None,
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.store = store  # the pipeline's one way to the database (store.sweep.pgstore.OutboxStore in the daemon)
        # Three seams, each time.monotonic or unseeded in the daemon, which the simulator (tests/sim)
        # drives from its virtual time and its seed: ``clock``, the leases' and the gates' (the unit tests
        # move it by hand); ``timer``, the drain's deadline and the requests' timings, the outage watch's
        # clock; ``rng``, the retries' jitter.
        self._timer = timer
        backoff = Backoff(settings.backoff_base, settings.backoff_max, rng=rng)
        policy = Policy(settings.max_attempts, backoff)
        auth = AuthGate(backoff, floor=settings.backoff_base, clock=clock, gauge=metrics.kube_refusing)  # 401
        namespaces = NamespaceGates(  # 403: one namespace's rows
            backoff, floor=settings.backoff_base, clock=clock, gauge=metrics.namespace_refused
        )
        # Shared with the surge watch (tasks/loops/surge.py), which trips it between claims.
        breaker = breaker or BreakerGate(metrics.breaker_tripped.labels(settings.cluster))
        # Where the stop is (stop.py): the runner and ``drain`` move it on, phase by phase; the claimer,
        # the workers and the recorder obey it.
        stop = self.stop = StopOrder()
        # Rows in hand at once: one batch queued behind the deletes in flight, so the workers never wait
        # for a claim round trip. (Capping the queue at `concurrency` made claims small and frequent:
        # the drain ran at 0.54 of the client's ceiling, 0.76 with this; bench/README.md.) A queued
        # row whose lease runs short before a worker reaches it is handed back, not sent.
        pipeline = self.pipeline = Pipeline(settings.concurrency + settings.batch_size)
        self.claimer = Claimer(
            settings,
            store,
            pipeline,
            metrics,
            policy=policy,
            auth=auth,
            breaker=breaker,
            outage=outage,
            stop=stop,
            schema=schema or SchemaGate(),
            clock=clock,
        )
        # Events on deleted pods (best effort, paced, off the rows' path); none in a dry run.
        self.events = EventSender(settings, kube, metrics, outage) if settings.events and not settings.dry_run else None
        self.sender = Sender(
            settings,
            kube,
            pipeline,
            metrics,
            policy=policy,
            auth=auth,
            namespaces=namespaces,
            breaker=breaker,
            outage=outage,
            stop=stop,
            events=self.events,
            clock=clock,
            timer=timer,
        )
        self.recorder = Recorder(
            store,
            pipeline,
            metrics,
            backoff=backoff,
            stop=stop,
            wake_claimer=self.claimer.notify,
        )
        self.status = SweeperStatus(self.claimer, auth, namespaces, breaker)
        self._tasks: list[asyncio.Task[None]] = []  # claimer, recorder and workers, once run() starts

    def notify(self, source: str) -> None:
        """Wake the claimer (a NOTIFY arrived, the listener reconnected, ...)."""
        self.claimer.notify(source)

    async def first_claim(self) -> None:
        """Until the start-up catch-up claim has run (readiness waits on it)."""
        await self.claimer.first_claim_done.wait()

    async def run(self) -> None:
        """Claimer, workers and recorder in one task group: any one dying stops the others."""
        async with asyncio.TaskGroup() as group:
            self._tasks = [
                group.create_task(self.claimer.run(), name="claimer"),
                group.create_task(self.recorder.run(), name="recorder"),
            ]
            self._tasks += [
                group.create_task(self.sender.worker(), name=f"worker-{i}") for i in range(self.settings.concurrency)
            ]
            if self.events is not None:
                self._tasks.append(group.create_task(self.events.run(), name="events"))

    async def drain(self, deadline: float) -> None:
        """Stop claiming, let in-flight deletes finish until ``deadline`` (on the sweeper's ``timer``:
        time.monotonic in the daemon), hand back the
        rest without charging an attempt, record everything, send the queued Events in the time left
        (counting what cannot be sent), and stop the tasks: each step a phase of ``self.stop``, reached
        in its order (stop.py), from ``CLAIMS_STOPPED`` to ``TASKS_ENDED``."""
        pipeline, stop = self.pipeline, self.stop
        stop.begin()
        stop.reach(Phase.CLAIMS_STOPPED)
        self.claimer.leave()
        # The wakeups to the others at once: retires that name this replica would wake nobody for as
        # long as its in-flight deletes and its Events take (and once more at the end, below).
        await self._wake_the_others()
        stop.reach(Phase.OTHERS_WOKEN)
        for claim in pipeline.stop_claiming():  # claimed but not started: back to pending at once
            pipeline.conclude(verdicts.handed_back(claim))
        stop.reach(Phase.QUEUE_HANDED_BACK)
        # The claimer ends its turn rather than being cancelled in it: a claim cancelled in flight may
        # have committed on the server with its answer lost on the way, leaving its rows claimed (and
        # charged) until their lease ends. A claim answered after the stop hands its rows straight back
        # (Claimer.run); one still unanswered at the deadline is cancelled below with the rest.
        if (claimer := self._task("claimer")) is not None:
            await asyncio.wait([claimer], timeout=max(0.0, deadline - self._timer()))
        stop.reach(Phase.CLAIM_RETURNED)
        # Each verdict settles a row; wait until every row in flight has one, or the deadline.
        while pipeline.awaiting_answers() and self._timer() < deadline:
            await pipeline.wait_settled(deadline - self._timer())
        stop.reach(Phase.DELETES_SETTLED)
        others = [task for task in self._tasks if task.get_name() not in ("recorder", "events")]
        for task in others:
            task.cancel()
        # Cancelled once, a task inside a query lets psycopg cancel it on the server and keep the
        # connection; cancelled again before that ends, psycopg closes the connection and logs two
        # warnings. So each is cancelled once here, and waited for (briefly) before anything else.
        if others:  # none when the stop came before run() made them (asyncio.wait refuses an empty set)
            await asyncio.wait(others, timeout=2.0)
        for claim in pipeline.awaiting_answers():  # still at the API after the deadline
            pipeline.conclude(verdicts.handed_back(claim))
        stop.reach(Phase.WORKERS_ENDED)
        try:
            await asyncio.wait_for(self.recorder.flush(), max(1.0, deadline - self._timer()))
        except (StoreError, TimeoutError) as exc:
            logger.error(
                "could not record {n} result(s) at shutdown; their leases will expire: {error}",
                n=pipeline.unwritten,
                error=first_line(exc),
            )
        stop.reach(Phase.RECORDED)
        events = self._task("events")
        if self.events is not None and events is not None:
            await self.events.finish(events, deadline)
        stop.reach(Phase.EVENTS_SENT)
        await self._wake_the_others()
        stop.reach(Phase.OTHERS_WOKEN_AGAIN)
        for task in self._tasks:
            if not task.done():
                task.cancel()
        self.sender.close()
        stop.reach(Phase.TASKS_ENDED)

    def _task(self, name: str) -> asyncio.Task[None] | None:
        return next((task for task in self._tasks if task.get_name() == name), None)

    async def _wake_the_others(self) -> None:
        # This replica may have cleared the wakeup flag (it was claiming), or be the one it names, and is
        # leaving: retires would not NOTIFY, or wake nobody. Its name is taken off the flag, and one NOTIFY
        # makes the others claim and arm it in their own names.
        try:
            async with asyncio.timeout(2), self.store.session() as session:
                await session.hand_on(stopping=True)
        except (StoreError, TimeoutError) as exc:
            logger.warning("could not wake the other replicas on the way out: {error}", error=first_line(exc))
