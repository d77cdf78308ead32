"""Where a replica's claim starts reading the claim index: a floor kept in memory, free of I/O.

While something pins the database's xmin horizon (a long report, an idle-in-transaction client, a
lagging slot, a standby with hot_standby_feedback), vacuum can remove no row version, and every version
the claims and records leave behind keeps its entry in the claim index. Those entries sit below the
open rows (a row's first version is keyed by its enqueue time, its claimed version by the end of its
lease), so a claim that reads the index from its start walks every row swept since the horizon was
taken: the cost of each claim grew without end (bench held snapshot, docs/design.md).

The cursor remembers a floor: a due time below which no open row was due when the process last looked
(the next-due read after a short claim). Claims read from the floor up. It is a hint, never a promise: a
row can appear below it (a host transaction that ran longer than ``MARGIN`` commits rows stamped with
its start; a pause or a hold ends; another replica's claim rolls back), so every ``DISCOVERY_SECONDS``
one claim reads from the start, and a discovery that fills its batch is followed by another, until one
comes back short. A row below the floor waits at most that long, plus the poll interval when idle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

# How far below the database's clock the floor stays: a host transaction that retires and commits
# within this many seconds of its start enqueues above the floor (a retire is milliseconds). Each claim
# reads the versions of this many seconds of retires and of lease ends: kept short.
MARGIN = timedelta(seconds=2)
# Seconds between claims that read the index from its start. Such a claim costs what the pinned horizon
# left behind (70 ms after half an hour at 100 retires a second, bench held snapshot); one every 10 s
# is a few ms a second, and the longest a row below the floor waits.
DISCOVERY_SECONDS = 10.0
# The floor of a discovery: the start of the index (PostgreSQL's smallest timestamptz would do too).
START = datetime.min.replace(tzinfo=UTC)


class ClaimCursor:
    """One process's floor in the claim index (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._floor: datetime | None = None
        self._discovered_at = -DISCOVERY_SECONDS
        self._discovering = False

    @property
    def floor(self) -> datetime | None:
        """The floor as it stands (None: none known yet, every claim reads from the start)."""
        return self._floor

    def claim_from(self) -> datetime:
        """Where the next claim starts reading: the floor, or the start for a discovery."""
        self._discovering = self._floor is None or self._clock() - self._discovered_at >= DISCOVERY_SECONDS
        if self._discovering:
            self._discovered_at = self._clock()
            return START
        return self._floor or START

    def discovery_in(self) -> float:
        """Seconds until a claim would read from the start (never quite 0: a sleep, not a spin)."""
        if self._floor is None:
            return 0.05
        return max(0.05, DISCOVERY_SECONDS - (self._clock() - self._discovered_at))

    def claimed(self, taken: int, wanted: int) -> None:
        """After a claim: a discovery that filled its batch may have left rows below the floor, so the
        next claim discovers too."""
        if self._discovering and taken >= wanted:
            self._discovered_at = -DISCOVERY_SECONDS

    def due_from(self) -> datetime:
        """Where the next-due read starts: the floor, after a discovery too (the start only while no
        floor is known). A discovery that came back short took every due row below the floor that was
        not kept back; what it left there is locked by another replica's claim (due again at that
        claim's lease end, above the floor, or found by the next discovery if the claim rolls back).
        Reading from the start again would double a discovery's cost under a pinned horizon (bench held
        snapshot: the next-due read was as dear as the discovery claim), for nothing."""
        return self._floor or START

    def looked(self, low: datetime | None, now: datetime) -> None:
        """After a next-due read from ``due_from()``: no open row that is not kept back is due between
        there and ``low`` (None: none at all) as of the database's ``now``. The floor moves up to the
        lower of ``low`` and ``now`` less the margin, never down."""
        candidate = now - MARGIN if low is None else min(low, now - MARGIN)
        self._floor = candidate if self._floor is None else max(self._floor, candidate)
