"""The heartbeat, a side loop of every replica: every PRESENCE_SECONDS its row in
``pod_sweeper.replicas`` is written whole (its settings, whether it is ready and the reasons it sees rows
wait), and a clean stop marks it stopped. That row is how the database knows who sweeps: ``status``
lists each cluster's replicas from it and says first when a cluster with open rows has none alive, and
``explain``, ``status``, the DBA's SQL and the gauges read the guard and dry run from it, never from their
reader's settings (docs/design.md, "Who sweeps").

Its cost on the primary (docs/performance.md): one statement and one commit per replica every
PRESENCE_SECONDS, a HOT update of one small row. Ten seconds keeps a replica's readiness and waits in
the database at most that stale, and a dead replica shown stale 30 s after its last heartbeat (three
missed, the rule of ``pod_sweeper.replica_state``), well inside the lag alerts' minutes, for 0.1
commits a second a replica.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Mapping

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
            heartbeat_seconds=self.interval,
            up_for=time.monotonic() - self._started,
        )

    async def run(self) -> None:
        while True:
            await self.beat()
            await periodic.pause(self.interval)

    async def beat(self) -> None:
        """One heartbeat; a failure is logged once when a streak of them starts and once when it ends
        (the gauges' refresh already says the database is unreachable; the row simply goes stale)."""
        try:
            async with self.pool.connection() as conn:
                await presence.beat(conn, self.beat_now())
        except psycopg.Error as exc:  # PoolTimeout included
            if not self._failing:
                logger.warning(
                    "cannot write this replica's row in pod_sweeper.replicas: {error}; `status` will show it "
                    "stale until a heartbeat succeeds",
                    error=first_line(exc),
                )
            self._failing = True
            return
        if self._failing:
            logger.info("this replica's row in pod_sweeper.replicas is current again")
        self._failing = False

    async def leave(self) -> None:
        """A clean stop: the row says so at once (bounded by LEAVE_TIMEOUT_SECONDS; a row not marked
        goes stale three heartbeats later, which says the same, later)."""
        try:
            async with asyncio.timeout(LEAVE_TIMEOUT_SECONDS):
                async with self.pool.connection(timeout=LEAVE_TIMEOUT_SECONDS) as conn:
                    await presence.stopped(conn, replica=self.settings.replica_id, cluster=self.settings.cluster)
        except (psycopg.Error, TimeoutError) as exc:
            logger.warning(
                "could not mark this replica stopped in pod_sweeper.replicas: {error}", error=first_line(exc)
            )
