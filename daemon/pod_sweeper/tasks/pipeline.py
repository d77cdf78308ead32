"""The rows a replica holds between their claim and the record of how they ended.

The claimer puts claimed rows in (``hold``), workers take them from the queue and put results back
(``record``), the recorder writes results and lets their rows go (``release``). ``capacity`` bounds what
is held: ``concurrency`` rows in flight plus one claim batch waiting, so the workers never wait for a
claim round trip and a claimed row waits seconds, not its lease, for its DELETE. What is still at the
API is derived (``awaiting_answers``), never counted by hand. A plain data structure: it decides
nothing and calls nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pod_sweeper.store.outbox import Claim, Verdict


@dataclass
class Work:
    claim: Claim
    lease_deadline: float  # time.monotonic() by which the lease ends, measured before the claim


class Pipeline:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.queue: asyncio.Queue[Work] = asyncio.Queue()  # claimed, not yet taken by a worker
        self.inflight: dict[int, Claim] = {}  # every row held, queued or at the API or recorded-not-written
        self.results: list[Verdict] = []  # how rows ended, not yet written
        self.results_ready = asyncio.Event()  # results wait to be written
        self.settled = asyncio.Event()  # a result came in (the shutdown drain waits on it)
        self.room = asyncio.Event()  # rows were let go: the claimer may claim again

    @property
    def free(self) -> int:
        return self.capacity - len(self.inflight)

    def hold(self, claims: list[Claim], lease_deadline: float) -> None:
        for claim in claims:
            self.inflight[claim.id] = claim
            self.queue.put_nowait(Work(claim, lease_deadline))

    def record(self, verdict: Verdict) -> None:
        self.results.append(verdict)
        self.results_ready.set()
        self.settled.set()

    def release(self, verdicts: list[Verdict]) -> None:
        """Written: the rows are no longer held."""
        for verdict in verdicts:
            self.inflight.pop(verdict.id, None)
        self.room.set()

    def awaiting_answers(self) -> list[Claim]:
        """The rows held whose request has no result yet (queued, or still at the API)."""
        recorded = {f.id for f in self.results}
        return [claim for claim in self.inflight.values() if claim.id not in recorded]
