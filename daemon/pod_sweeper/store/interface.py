"""What the sweep pipeline asks of the outbox, as an interface: ``SweepStore`` gives ``SweepSession``s,
each one connection's worth of the outbox for one cluster and one replica.

The claimer and the recorder (and their hand-on of the wakeups, ``hand_on``) reach the database only through these
methods, so the pipeline can run on another store: ``store.sweep.pgstore.OutboxStore`` is the real one,
PostgreSQL through the pool; the test tree's ``harness.memstore.MemoryStore`` keeps rows in memory on a fake clock, for
unit tests of the tasks, and is held to the real one by tests/integration/test_store_contract.py.

The interface names no database library: its rows are ``store.rows``' and its one failure is
``StoreError``, which the PostgreSQL store raises from psycopg's errors (the cause kept).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Protocol

from pod_sweeper.store.rows import Arming, AtClaim, BreakerWindow, ClaimedBatch, Verdict


class StoreError(Exception):
    """The store could not do what it was asked (the database failed, or no connection could be had
    in time): the pipeline's tasks count it, log its one line and try again. ``__cause__`` holds the
    database's own error."""


class SweepSession(Protocol):
    """One connection's worth of one cluster's outbox, as one replica sees it (see ``store.sweep.outbox`` for
    what each statement does)."""

    def transaction(self) -> AbstractAsyncContextManager[object]:
        """What runs inside commits together (the breaker's budget and the claim; a record)."""
        ...

    async def claim(
        self,
        *,
        batch: int,
        lease_seconds: float,
        disarm: bool,
        at_claim: AtClaim,
        guard: list[str] | None,
        transaction_rows: int = 0,
        gathering: bool = False,
    ) -> ClaimedBatch:
        """Claim and re-check up to ``batch`` due rows; those ``at_claim`` ends are recorded at once.
        With ``transaction_rows``, raise ``LargeTransaction`` and claim nothing when the rows of one host
        transaction taken and still pending come to that many (the breaker's transaction rule). With
        ``disarm``, a full batch clears the wakeup flag, and so does any row taken while ``gathering``."""
        ...

    async def guard_mark(self) -> int:
        """The replication guard's mark of the open rows no mark vouches for yet."""
        ...

    async def record_results(self, verdicts: list[Verdict]) -> set[int]:
        """Write the verdicts, fenced on each row's claim epoch; the ids this replica still owned."""
        ...

    async def next_due(self) -> float | None:
        """Seconds until the next open row is due (negative: due now); None: none is open."""
        ...

    async def arm(self, *, take_over: bool = False) -> Arming:
        """Arm the wakeup flag in this replica's name before sleeping (``Arming`` says what it found);
        with ``take_over``, also when it names another replica, whose wakeups went unclaimed."""
        ...

    async def look_ahead(self, *, arm: bool, take_over: bool = False) -> tuple[float | None, Arming | None]:
        """After a claim, in its transaction: ``next_due``, and (with ``arm``) whether the wakeup flag is
        armed in a replica's name already (``ALREADY``) or is to be armed after the turn (``NEEDED``:
        the arming takes the lock every retire queues behind, so it runs in a statement of its own)."""
        ...

    async def breaker_window(self) -> BreakerWindow:
        """Inside a transaction: the cluster's breaker, its row held until the transaction ends."""
        ...

    async def breaker_tripped(self) -> str | None:
        """Why the cluster's breaker is tripped (None: it is not); no lock, no count."""
        ...

    async def trip_breaker(self, reason: str) -> None: ...

    async def keep_back_transaction(self, at: datetime, rows: int, reason: str) -> int | None:
        """Keep the rows of the large host transaction that began ``at`` back as one batch, neither sent
        nor charged, until an on-call releases it (the breaker's transaction rule); its id, or None when
        another replica recorded it first."""
        ...

    async def hand_on(self, *, stopping: bool = False) -> None:
        """The wakeup flag no longer names this replica (it is ``stopping``, or holds more than it can
        send soon), and one NOTIFY wakes the cluster's other listening replicas (when stopping always;
        else only if the flag named this one)."""
        ...


class SweepStore(Protocol):
    def session(self) -> AbstractAsyncContextManager[SweepSession]:
        """A session for as long as the block runs (a pooled connection, for the real store). A failure
        of the store, getting the session or inside the block, comes out as ``StoreError``."""
        ...

    def rediscover_in(self) -> float | None:
        """Seconds until the next claim reads from the start of the claim index (store/sweep/cursor.py), so
        the claimer sleeps no longer than that: a row below the floor (rows a pause kept, a long host
        transaction's) is found then, not at the next poll. None: the store keeps no floor."""
        ...
