"""The simulator's event loop: virtual time, a seeded choice of what runs next, hand-offs run inline.

A subclass of ``asyncio.BaseEventLoop``, so the daemon's tasks run on it unchanged (``asyncio.Queue``,
``Event``, ``wait_for``, ``timeout``, ``TaskGroup`` all schedule through it). Three things differ from
the loop the daemon runs on:

- ``time()`` is virtual: it stands still while callbacks run and, when nothing is ready, jumps to the
  next timer. A minute of the daemon's sleeps costs nothing; no wall-clock read decides anything.
- Each step runs one ready callback, chosen by the seeded ``random.Random`` among all that are ready:
  every interleaving of the tasks' awaits that asyncio could produce is one the seed may draw. Each
  choice among several is kept (``choices``); a run given ``forced`` choices takes those instead, and
  the first ready (asyncio's own order) once they run out: what the shrinker (tests/sim/runner.py) uses.
- ``run_in_executor`` (and so ``asyncio.to_thread``) runs the function at the virtual instant of the
  hand-off on a pool thread of its own that runs only while the loop's thread waits for it (one
  thread runs at a time, so a run stays one schedule), and delivers its result after the latency the
  scripted world asked for (``charge``) plus a seeded jitter. The thread's work is one step unless
  the function reaches a yield point (``pause``: the scripted world's stand-ins call it where a real
  request thread may be preempted, in the credential hook); there it parks, and when it goes on is a
  ready callback like any other, the seed's choice, so request threads interleave with each other and
  with the tasks.
- Its tasks and futures hash by the order they were made, not by their address: asyncio keeps them
  in sets (a ``TaskGroup`` cancels its tasks in its set's order, ``asyncio.wait`` takes a set), and an
  address-ordered set would make the same seed schedule differently from one run to the next.

Nothing here knows the daemon: ``tests/sim/world.py`` builds the replicas on it.
"""

from __future__ import annotations

import _thread
import asyncio
import heapq
import itertools
import os
import random
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Stuck(RuntimeError):
    """Nothing is ready and no timer is set: every task waits for something that never comes."""


class HandoffGone(BaseException):
    """Raised at a yield point of a hand-off whose process is gone (its replica killed, the run over):
    the thread unwinds, and nothing it would have done afterwards happens."""


class _Worker:
    """A pool thread that runs one hand-off at a time and only while the loop's thread waits for it:
    ``switch`` (the loop's thread) lets it run until it parks at a yield point or ends, ``park`` (the
    worker, at a yield point) gives the turn back. Workers outlive a run and are reused (a thread costs
    more than a run's hand-offs), kept in ``_IDLE``."""

    def __init__(self) -> None:
        self._go, self._back = _thread.allocate_lock(), _thread.allocate_lock()
        self._go.acquire()
        self._back.acquire()
        self.job: _Job | None = None
        threading.Thread(target=self._serve, name="sim-handoff", daemon=True).start()

    def _serve(self) -> None:
        while True:
            self._go.acquire()
            job = self.job
            assert job is not None
            try:
                job.result = job.func(*job.args)
            except BaseException as exc:  # delivered to the awaiting task, as a pool thread's would be
                job.error = exc
            job.done = True
            self._back.release()

    def switch(self) -> None:
        self._go.release()
        self._back.acquire()

    def park(self) -> None:
        self._back.release()
        self._go.acquire()


_IDLE: list[_Worker] = []
# A process forked for more seeds (runner.run_many) has none of its parent's threads: their workers
# would never answer there.
os.register_at_fork(after_in_child=_IDLE.clear)


class _Job:
    """One hand-off: its function, its worker while it runs, what it returned and the latency it asked for."""

    def __init__(
        self, serial: int, func: Callable[..., Any], args: tuple[Any, ...], future: asyncio.Future[Any]
    ) -> None:
        self.serial, self.func, self.args, self.future = serial, func, args, future
        self.worker = _IDLE.pop() if _IDLE else _Worker()
        self.worker.job = self
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.gone = False  # the run is over: its yield points raise HandoffGone
        self.charged = 0.0
        self.resume_after = 0.0  # how long its last yield point parks it (``pause``)


class _Task(asyncio.Task[Any]):
    """A task that hashes by the order it was made in (see the module's docstring)."""

    serial = 0

    def __hash__(self) -> int:
        return self.serial


class _Future(asyncio.Future[Any]):
    serial = 0

    def __hash__(self) -> int:
        return self.serial


class SimLoop(asyncio.BaseEventLoop):
    def __init__(
        self,
        rng: random.Random,
        *,
        start: float = 1000.0,
        handoff_jitter: float = 0.002,
        forced: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.rng = rng
        self.choices: list[int] = []  # the index taken at each step with more than one ready
        self._forced = forced
        self._now = start
        self._handoff_jitter = handoff_jitter
        self._job: _Job | None = None  # the hand-off running now, on its worker
        self._parked: set[_Job] = set()  # hand-offs waiting at a yield point
        self.steps = 0  # callbacks run: the schedule's length
        self.on_step: Callable[[], None] | None = None  # called after every step (the invariants)
        self._serials = itertools.count(1)
        self.set_task_factory(self._task)

    def _task(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task = _Task(coro, loop=loop, **kwargs)
        task.serial = next(self._serials)
        return task

    def create_future(self) -> asyncio.Future[Any]:
        future = _Future(loop=self)
        future.serial = next(self._serials)
        return future

    def time(self) -> float:
        return self._now

    def charge(self, seconds: float) -> None:
        """From inside a function run by ``run_in_executor``: its answer comes ``seconds`` later."""
        if self._job is not None:
            self._job.charged += max(0.0, seconds)

    def pause(self, seconds: float = 0.0) -> None:
        """A yield point of the hand-off running now: it parks, and goes on when the seed picks it (a
        ready callback), ``seconds`` later (a thread descheduled, a slow call). Nothing on the loop's
        own thread (a statement of a task): it goes on at once."""
        job = self._job
        if job is None:
            return
        if job.gone:
            raise HandoffGone
        job.resume_after = seconds
        job.worker.park()
        if job.gone:
            raise HandoffGone

    def run_in_executor(self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self.create_future()
        self._switch(_Job(next(self._serials), func, args, future))
        return future

    def _switch(self, job: _Job) -> None:
        """Let the hand-off run until it parks (then its going on is a ready callback) or ends (then its
        result comes after the latency it asked for)."""
        if job.done:  # abandoned (``abandon_handoffs``) before its turn came
            return
        self._job = job
        try:
            job.worker.switch()
        finally:
            self._job = None
        if not job.done:
            self._parked.add(job)
            if job.resume_after > 0:
                self.call_later(job.resume_after, self._switch, job)
            else:
                self.call_soon(self._switch, job)
            return
        self._parked.discard(job)
        job.worker.job = None
        _IDLE.append(job.worker)
        delay = job.charged + self.rng.uniform(0.0, self._handoff_jitter)
        future, result, error = job.future, job.result, job.error

        def deliver() -> None:
            if future.cancelled() or isinstance(error, HandoffGone):  # nobody is left to hear it
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        self.call_later(delay, deliver)

    def abandon_handoffs(self) -> None:
        """The run is over: every hand-off still parked unwinds (``HandoffGone`` at its yield point) and its
        worker goes back to the pool."""
        while self._parked:
            job = min(self._parked, key=lambda j: j.serial)
            job.gone = True
            self._switch(job)

    def _write_to_self(self) -> None:  # call_soon_threadsafe: no selector to wake, one thread
        pass

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _run_once(self) -> None:
        scheduled: list[asyncio.TimerHandle] = self._scheduled  # type: ignore[attr-defined]
        ready: Any = self._ready  # type: ignore[attr-defined]
        while scheduled and scheduled[0].cancelled():
            heapq.heappop(scheduled)
        if not ready:
            if not scheduled:
                raise Stuck("nothing is ready and no timer is set")
            self._now = max(self._now, scheduled[0].when())
        while scheduled and scheduled[0].when() <= self._now:
            handle = heapq.heappop(scheduled)
            handle._scheduled = False  # type: ignore[attr-defined]
            if not handle.cancelled():
                ready.append(handle)
        if not ready:
            return
        index = 0
        if len(ready) > 1:
            index = self.rng.randrange(len(ready))  # drawn when forced too: the jitter's draws stay in step
            if self._forced is not None:
                taken = len(self.choices)
                index = self._forced[taken] % len(ready) if taken < len(self._forced) else 0
            self.choices.append(index)
        ready.rotate(-index)
        handle = ready.popleft()
        ready.rotate(index)
        if handle.cancelled():
            return
        self.steps += 1
        handle._run()
        if self.on_step is not None:
            self.on_step()
