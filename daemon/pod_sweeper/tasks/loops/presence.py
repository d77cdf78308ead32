"""The heartbeat, a side loop of every replica: every PRESENCE_SECONDS it looks at what its row in
``pod_sweeper.replicas`` says (its settings, whether it is ready and the reasons it sees rows wait) and
writes it whole when any of that changed, or when the last write is REFRESH_LOOKS looks old; a clean
stop marks it stopped. That row is how the database knows who sweeps: ``status``
lists each cluster's replicas from it and says first when a cluster with open rows has none alive, and
``explain``, ``status``, the DBA's SQL and the gauges read the guard and dry run from it, never from their
reader's settings (docs/design.md, "Who sweeps").

Its cost on the primary (docs/performance.md): at most one statement and one commit per replica a
look, and on a steady replica one every REFRESH_LOOKS looks (30 s: a change is its readiness, a reason
starting or ending, or a setting, never a reason's particulars moving), a HOT update of one small row: 0.03
commits and about 6 B of WAL a second a replica, idle. The looks cost the primary nothing (they read
the replica's own memory). Ten seconds keeps a replica's readiness and waits in the database at most
that stale; a dead replica is shown stale once three writes are missed (``pod_sweeper.replica_state``,
from the ``heartbeat_seconds`` the row states: 30 s, so 90 s), inside the minutes the lag alerts take.
Written every look (10 s), three idle replicas wrote 63 B/s of WAL where PostgreSQL's own is 5 (bench
``cost``).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper import __version__
from pod_sweeper.core import periodic
from pod_sweeper.core.errors import first_line
from pod_sweeper.core.settings import Settings
from pod_sweeper.core.waits import Wait
from pod_sweeper.store.db import Connection
from pod_sweeper.store.schema import migrations
from pod_sweeper.store.sweep import presence

PRESENCE_SECONDS = 10.0
REFRESH_LOOKS = 3  # a row unchanged is written again every this many looks: its seen_at, the liveness
LEAVE_TIMEOUT_SECONDS = 2.0  # a clean stop's mark may take this long before the stop goes on without it


class Presence:
    """Owns this replica's row. ``state`` says, when asked, whether the replica is ready and the reasons
    it sees rows wait (``Health.readiness`` and ``Health.waits``)."""

    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Connection],
        state: Callable[[], tuple[bool, Mapping[Wait, str]]],
        *,
        interval: float | None = None,
    ) -> None:
        self.settings, self.pool, self.state = settings, pool, state
        self.interval = PRESENCE_SECONDS if interval is None else interval
        self._written: presence.Beat | None = None  # what the row says, as last written (``_settled``)
        self._looks = 0  # looks since that write
        # A clean stop's mark and a heartbeat never interleave: a heartbeat in flight when the stop comes
        # is let finish first, and none is written after the mark (its upsert would read live again).
        self._writing = asyncio.Lock()
        self._left = False
        self._started = time.monotonic()
        self._failing = False

    def beat_now(self) -> presence.Beat:
        """What this heartbeat writes."""
        s = self.settings
        ready, waits = self.state()
        return presence.Beat(
            replica=s.replica_id,
            host=socket.gethostname(),
            release=__version__,
            schema_version=migrations.expected_version(),
            cluster=s.cluster,
            namespaces=tuple(sorted(s.namespaces)) if s.namespaces is not None else None,
            dry_run=s.dry_run,
            dry_run_namespaces=tuple(sorted(s.dry_run_namespaces)) if s.dry_run_namespaces else None,
            guard=tuple(s.guard_standbys) if s.guard_standbys else None,
            rate_limit=s.rate_limit_qps,
            concurrency=s.concurrency,
            ready=ready,
            waits={wait.value: detail for wait, detail in sorted(waits.items())},
            heartbeat_seconds=self.interval * REFRESH_LOOKS,  # the longest between two writes
            up_for=time.monotonic() - self._started,
        )

    async def run(self) -> None:
        while True:
            await self.look()
            await periodic.pause(self.interval)

    async def look(self) -> None:
        """One look: the row written when what it says changed, or when its last write is REFRESH_LOOKS
        looks old (its seen_at, which says the replica is alive)."""
        now = self.beat_now()
        self._looks += 1
        if self._written is not None and self._looks < REFRESH_LOOKS and _settled(now) == self._written:
            return
        async with self._writing:
            if self._left:
                return
            if await self.beat(now):
                self._written, self._looks = _settled(now), 0

    async def beat(self, now: presence.Beat) -> bool:
        """Write the row; whether it was written. A failure is logged once when a streak of them starts
        and once when it ends (the gauges' refresh already says the database is unreachable; the row
        simply goes stale)."""
        try:
            async with self.pool.connection() as conn:
                await presence.beat(conn, now)
        except psycopg.Error as exc:  # PoolTimeout included
            if not self._failing:
                logger.warning(
                    "cannot write this replica's row in pod_sweeper.replicas: {error}; `status` will show it "
                    "stale until a heartbeat succeeds",
                    error=first_line(exc),
                )
            self._failing = True
            return False
        if self._failing:
            logger.info("this replica's row in pod_sweeper.replicas is current again")
        self._failing = False
        return True

    async def leave(self) -> None:
        """A clean stop: the row says so at once (bounded by LEAVE_TIMEOUT_SECONDS; a row not marked
        goes stale three heartbeats later, which says the same, later)."""
        try:
            async with asyncio.timeout(LEAVE_TIMEOUT_SECONDS), self._writing:
                self._left = True
                async with self.pool.connection(timeout=LEAVE_TIMEOUT_SECONDS) as conn:
                    await presence.stopped(conn, replica=self.settings.replica_id, cluster=self.settings.cluster)
        except (psycopg.Error, TimeoutError) as exc:
            logger.warning(
                "could not mark this replica stopped in pod_sweeper.replicas: {error}", error=first_line(exc)
            )


def _settled(beat: presence.Beat) -> presence.Beat:
    """What a heartbeat compares with the last write: the row without its clock (how long the process
    has run) and without the particulars of each reason (a count or an age that moves at every refresh,
    such as the guard's oldest row: compared, the row was written at every look while a reason held)."""
    return replace(beat, up_for=0.0, waits=dict.fromkeys(beat.waits, ""))
