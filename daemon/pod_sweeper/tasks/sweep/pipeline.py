"""The rows a replica has in hand between their claim and the record of how they ended, and the one place
that decides what may be done with them.

The claimer puts claimed rows in (``add``) when there is room (``free``, ``wait_for_room``); workers
take them (``next_work``, ``more_work``) and put each row's verdict back (``conclude``); the recorder
writes the verdicts (``write_results``), which lets their rows go. ``capacity`` bounds what is in hand:
``concurrency`` rows in flight plus one claim batch waiting, so the workers never wait for a claim round
trip and a claimed row waits seconds, not its lease, for its DELETE. What is still at the API is
derived (``awaiting_answers``), never counted by hand. Each verdict is written once: ``write_results``
lets one writer at a time take what is waiting (the recorder's task and the shutdown drain both write),
and removes a batch only once it is written. Its state is its own; it decides nothing about a row and
does no I/O but through the writer it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pod_sweeper.store.rows import Claim, Verdict


@dataclass
class Work:
    claim: Claim
    lease_deadline: float  # time.monotonic() by which the lease ends, measured before the claim


class Pipeline:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._queue: asyncio.Queue[Work] = asyncio.Queue()  # claimed, not yet taken by a worker
        # Every claim in hand (queued, at the API, or not yet written), by row and claim epoch: a replica
        # whose lease ran out behind a stalled statement may claim the same row again while the older
        # claim's verdict still waits to be written, and holds both (issue 53's simulator found it: by
        # row alone, the second claim replaced the first, and writing the first's verdict let the second
        # go, so the drain neither waited for its request nor handed it back).
        self._inflight: dict[tuple[int, int], Claim] = {}
        self._results: list[Verdict] = []  # how rows ended, not yet written
        self._results_ready = asyncio.Event()  # verdicts wait to be written
        self._settled = asyncio.Event()  # a verdict came in (the shutdown drain waits on it)
        self._room = asyncio.Event()  # rows were let go: the claimer may claim again
        self._writing = asyncio.Lock()  # one writer at a time: each verdict is written once

    # --- the claimer ------------------------------------------------------------------------------

    @property
    def free(self) -> int:
        return self.capacity - len(self._inflight)

    @property
    def queued(self) -> int:
        """Rows claimed and not yet taken by a worker."""
        return self._queue.qsize()

    async def wait_for_room(self) -> None:
        """Until rows are let go (or the drain opens the way)."""
        self._room.clear()
        await self._room.wait()

    def add(self, claims: list[Claim], lease_deadline: float) -> None:
        for claim in claims:
            self._inflight[(claim.id, claim.epoch)] = claim
            self._queue.put_nowait(Work(claim, lease_deadline))

    # --- the workers ------------------------------------------------------------------------------

    async def next_work(self) -> Work:
        return await self._queue.get()

    def more_work(self, most: int) -> list[Work]:
        """Up to ``most`` more rows that are waiting, without waiting for any."""
        taken: list[Work] = []
        with contextlib.suppress(asyncio.QueueEmpty):
            while len(taken) < most:
                taken.append(self._queue.get_nowait())
        return taken

    def conclude(self, verdict: Verdict) -> None:
        self._results.append(verdict)
        self._results_ready.set()
        self._settled.set()

    # --- the recorder -----------------------------------------------------------------------------

    @property
    def unwritten(self) -> int:
        """Verdicts waiting to be written."""
        return len(self._results)

    async def wait_for_results(self) -> None:
        await self._results_ready.wait()

    async def write_results(self, write: Callable[[list[Verdict]], Awaitable[None]], batch: int) -> None:
        """Every verdict waiting, given to ``write`` ``batch`` at a time; a batch leaves the pipeline
        (and its rows are let go) only once ``write`` has returned. One writer at a time: the recorder's
        task and the shutdown drain both write, and would otherwise write the same verdicts twice."""
        async with self._writing:
            while self._results:
                verdicts = self._results[:batch]
                await write(verdicts)
                del self._results[: len(verdicts)]
                for verdict in verdicts:
                    self._inflight.pop((verdict.id, verdict.epoch), None)
                self._room.set()
            self._results_ready.clear()

    # --- the shutdown drain and the status ----------------------------------------------------------

    def stop_claiming(self) -> list[Claim]:
        """The claimer is let out of its wait for room, and the rows no worker has taken are taken back
        from the queue (for the drain to hand back)."""
        self._room.set()
        return [work.claim for work in self.more_work(self._queue.qsize())]

    async def wait_settled(self, timeout: float) -> None:
        """Until the next verdict comes in, or ``timeout`` seconds."""
        self._settled.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), timeout)

    def awaiting_answers(self) -> list[Claim]:
        """The rows in hand whose request has no verdict yet (queued, or still at the API)."""
        concluded = {(verdict.id, verdict.epoch) for verdict in self._results}
        return [claim for key, claim in self._inflight.items() if key not in concluded]
