"""The order of a replica's clean stop, written once: the phases, in order, that every task obeys.

Why one object: the stop's order (no claim begins, the wakeups go to the others, the queued rows go
back, the claim in flight comes back, the deletes at the API settle by the deadline, what is left goes
back, everything is recorded, the Events are sent, the replica's row says it stopped) was the sum of
events of the sweeper, the claimer and the pipeline, and of the order of the lines that set them; no
one place said it and nothing checked it. Here each step is a ``Phase``, in the order docs/design.md
("The stop, in order") gives, and ``StopOrder.reach`` refuses a phase out of turn: whoever moves the
stop on (the runner, ``Sweeper.drain``) names each phase as it reaches it, so a step moved or dropped
fails loudly: the drain ends there, and the rows it had not handed back wait out their leases (safe: the
UID precondition makes a repeated DELETE harmless) rather than the stop going on in an order nobody wrote
down. The tasks ask it one question, ``stopping`` (no claim may
begin), and wait on it (``wait``); a pool thread may read ``stopping`` (one integer the loop writes).

No I/O and no clock: the deadline is the drain's; this object only says where the stop is.
"""

from __future__ import annotations

import asyncio
import enum

from loguru import logger


class Phase(enum.IntEnum):
    """The stop's phases, in the order they happen; each is reached once, after the one before it."""

    RUNNING = 0  # no stop asked for
    NOT_READY = 1  # /readyz and systemd say stopping (the runner; a sweeper on its own has no probe)
    CLAIMS_STOPPED = 2  # no claim begins: the claimer leaves after its turn, no worker starts another row
    OTHERS_WOKEN = 3  # this replica's name off the wakeup flag, one NOTIFY to the others
    QUEUE_HANDED_BACK = 4  # rows claimed and taken by no worker: back to pending, uncharged
    CLAIM_RETURNED = 5  # the claim in flight came back (its rows handed back), or the deadline came
    DELETES_SETTLED = 6  # every row at the API has its verdict, or the deadline came
    WORKERS_ENDED = 7  # the claimer and the workers cancelled; rows still at the API handed back
    RECORDED = 8  # every verdict written (or the failure logged: their leases run out)
    EVENTS_SENT = 9  # queued Events sent in the time left, the rest counted as dropped
    OTHERS_WOKEN_AGAIN = 10  # once more, for the retires of the drain's own seconds
    TASKS_ENDED = 11  # the recorder and the Events task cancelled, the request threads told to close (not awaited)
    LEFT = 12  # the replica's row in pod_sweeper.replicas marked stopped (the runner's presence)


class StopOutOfOrder(RuntimeError):
    """A phase reached out of turn: a bug in whoever moves the stop on, never a condition to handle."""


class StopOrder:
    """Where one replica's stop is. ``reach`` moves it on by exactly one phase; ``stopping`` and ``wait``
    are what the tasks obey."""

    def __init__(self) -> None:
        self._phase = Phase.RUNNING
        self._reached = {phase: asyncio.Event() for phase in Phase}
        self._reached[Phase.RUNNING].set()

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def stopping(self) -> bool:
        """No claim may begin, and no worker sends a row it has not started (``CLAIMS_STOPPED`` reached)."""
        return self._phase >= Phase.CLAIMS_STOPPED

    def reached(self, phase: Phase) -> bool:
        return self._phase >= phase

    def reach(self, phase: Phase) -> None:
        """Move the stop on to ``phase``, which must be the next one; ``StopOutOfOrder`` otherwise."""
        if phase != self._phase + 1:
            raise StopOutOfOrder(f"the stop is at {self._phase.name}: {phase.name} is not next")
        self._phase = phase
        self._reached[phase].set()
        logger.debug("stop: {phase}", phase=phase.name.lower())

    def begin(self) -> None:
        """The first phase, for a sweeper stopped on its own (no runner made it not ready first: the
        simulator's, the unit tests'); a stop the runner began already is left as it is."""
        if self._phase is Phase.RUNNING:
            self.reach(Phase.NOT_READY)

    async def wait(self, phase: Phase) -> None:
        """Until ``phase`` is reached (at once if it was)."""
        await self._reached[phase].wait()
