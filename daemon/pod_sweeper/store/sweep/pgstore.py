"""The sweep pipeline's store on PostgreSQL (``store.interface.SweepStore``): the hot path's
transitions (``store.sweep.outbox``, ``store.sweep.breaker``, ``store.sweep.channel``) on a pooled
connection, bound to one cluster and one replica, keeping what a replica carries from claim to claim
(the attachments, the claim cursor, the replication guard's backoff)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg

from pod_sweeper.core.errors import first_line
from pod_sweeper.store.db import Connection
from pod_sweeper.store.interface import StoreError
from pod_sweeper.store.rows import Arming, AtClaim, AttachedTable, BreakerWindow, ClaimedBatch, Verdict
from pod_sweeper.store.sweep import breaker, channel, outbox, recheck
from pod_sweeper.store.sweep.cursor import ClaimCursor

if TYPE_CHECKING:  # the daemon's pool, named in OutboxStore's signature: a one-shot command never imports it
    from psycopg_pool import AsyncConnectionPool


def arming_needed(due: outbox.Due, *, owner: str, take_over: bool) -> Arming:
    """What the flag as the turn read it asks of this replica before it sleeps: ``ALREADY`` when it is
    armed and names a replica (this one, or another that is not to be taken over), else ``NEEDED``: arm
    it (sql/arm.sql) after the turn commits."""
    named = due.flag_armed and due.flag_by is not None
    if named and (not take_over or due.flag_by == owner):
        return Arming.ALREADY
    return Arming.NEEDED


class OutboxSession:
    """The hot path's transitions, on one pooled connection, for one cluster and one replica."""

    def __init__(self, conn: Connection, store: OutboxStore) -> None:
        self._conn, self._store = conn, store
        self._cluster, self._owner = store.cluster, store.replica

    def transaction(self) -> AbstractAsyncContextManager[object]:
        return self._conn.transaction()

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
        store = self._store
        try:
            claimed = await outbox.claim(
                self._conn,
                cluster=self._cluster,
                owner=self._owner,
                batch=batch,
                lease_seconds=lease_seconds,
                attachments=store.attachments,
                disarm=disarm,
                at_claim=at_claim,
                guard=guard,
                floor=store.cursor.claim_from(),
                transaction_rows=transaction_rows,
                disarm_after=outbox.DISARM_AFTER_SECONDS,
                contain=store.contain_rechecks,
                gathering=gathering,
            )
        except recheck.BareLookupFailed:
            # The re-check runs bare (two round trips fewer a claim than a savepoint around each table's
            # lookup) until a lookup fails: that rolled the whole turn back, nothing claimed or charged, and
            # from then on this replica contains each lookup, so the next turn leaves only that table's rows
            # unknown and every other row goes on. A host table that stops fitting its attachment is an
            # operator's change, rare enough that one turn lost to it costs less than the savepoints would.
            # The choice lasts the process: a replica started again loses one turn again (a table dropped
            # before it started is found at its start, and costs nothing).
            store.contain_rechecks = True
            raise
        store.cursor.claimed(claimed.taken, batch)
        if claimed.taken:
            store.guard_waits = 0
        store.attachments = claimed.attachments  # what the re-check read the rows through
        return claimed

    async def guard_mark(self) -> int:
        return await outbox.guard_mark(self._conn, cluster=self._cluster)

    async def record_results(self, verdicts: list[Verdict]) -> set[int]:
        return await outbox.record_results(self._conn, verdicts, self._owner, cluster=self._cluster)

    async def next_due(self) -> float | None:
        return (await self._next_due()).seconds

    async def _next_due(self) -> outbox.Due:
        store = self._store
        due = await outbox.next_due(
            self._conn,
            cluster=self._cluster,
            cursor=store.cursor,
            horizon=store.due_horizon,
            guard=store.guard,
            recheck=outbox.GUARD_RECHECK.ceiling(store.guard_waits + 1),
        )
        store.guard_waits = store.guard_waits + 1 if due.guard_keeps_back else 0
        return due

    async def arm(self, *, take_over: bool = False) -> Arming:
        return await outbox.arm(self._conn, self._owner, cluster=self._cluster, take_over=take_over)

    async def look_ahead(self, *, arm: bool, take_over: bool = False) -> tuple[float | None, Arming | None]:
        due = await self._next_due()
        if not arm:
            return due.seconds, None
        return due.seconds, arming_needed(due, owner=self._owner, take_over=take_over)

    async def breaker_window(self) -> BreakerWindow:
        return await breaker.breaker_window(self._conn, self._cluster)

    async def breaker_tripped(self) -> str | None:
        return await breaker.breaker_tripped(self._conn, self._cluster)

    async def trip_breaker(self, reason: str) -> None:
        await breaker.trip_breaker(self._conn, self._cluster, reason, self._owner)

    async def keep_back_transaction(self, at: datetime, rows: int, reason: str) -> int | None:
        return await outbox.keep_back_transaction(
            self._conn, cluster=self._cluster, at=at, rows=rows, reason=reason, who=self._owner
        )

    async def hand_on(self, *, stopping: bool = False) -> None:
        await channel.hand_on(self._conn, cluster=self._cluster, owner=self._owner, always=stopping)


class OutboxStore:
    """The outbox in PostgreSQL for one replica of one cluster: a session per pooled connection. It keeps
    the attachments the last claim's re-check read rows through (the start-up's, until a row names one
    it did not have), and where its claims read the claim index from (store/sweep/cursor.py). ``due_horizon``:
    how far ahead ``next_due`` looks (the caller's longest sleep, its poll interval); ``guard``: the
    standbys the replication guard names, whose kept-back rows ``next_due`` does not count as due."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        *,
        cluster: str,
        replica: str,
        attachments: Mapping[int, AttachedTable],
        due_horizon: float = 86_400.0,
        guard: list[str] | None = None,
    ) -> None:
        self.pool, self.cluster, self.replica, self.attachments = pool, cluster, replica, attachments
        self.cursor = ClaimCursor()
        self.due_horizon = due_horizon
        self.guard = guard
        self.guard_waits = 0  # next-due reads in a row the guard kept rows back at: GUARD_RECHECK's attempt
        self.contain_rechecks = False  # each table's re-check in a savepoint: once one has failed (claim)

    def rediscover_in(self) -> float | None:
        return self.cursor.discovery_in()

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[OutboxSession]:
        # psycopg's errors (the pool's timeout among them) leave as the interface's one error type; the
        # connection is given back (rolled back) by the pool's own block before they are translated.
        try:
            async with self.pool.connection() as conn:
                yield OutboxSession(conn, self)
        except psycopg.Error as exc:
            raise StoreError(first_line(exc)) from exc
