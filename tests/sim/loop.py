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
- ``run_in_executor`` (and so ``asyncio.to_thread``) runs the function inline, at the virtual instant
  of the hand-off, and delivers its result after the latency the scripted world asked for
  (``charge``) plus a seeded jitter: the thread's work is one atomic step, its answer a timer.
- Its tasks and futures hash by the order they were made, not by their address: asyncio keeps them
  in sets (a ``TaskGroup`` cancels its tasks in its set's order, ``asyncio.wait`` takes a set), and an
  address-ordered set would make the same seed schedule differently from one run to the next.

Nothing here knows the daemon: ``tests/sim/world.py`` builds the replicas on it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Stuck(RuntimeError):
    """Nothing is ready and no timer is set: every task waits for something that never comes."""


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
        self._charged = 0.0  # latency the function run inline asked for (``charge``)
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
        self._charged += max(0.0, seconds)

    def run_in_executor(self, executor: Executor | None, func: Callable[[*Ts], T], *args: *Ts) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self.create_future()
        self._charged = 0.0
        try:
            result = func(*args)
        except BaseException as exc:  # delivered to the awaiting task, as a pool thread's would be
            error: BaseException | None = exc
        else:
            error = None
        delay = self._charged + self.rng.uniform(0.0, self._handoff_jitter)
        self._charged = 0.0

        def deliver() -> None:
            if future.cancelled():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        self.call_later(delay, deliver)
        return future

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
