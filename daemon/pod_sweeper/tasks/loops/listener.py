"""The LISTEN connection: turns ``NOTIFY pod_sweeper`` into an immediate claim.

It runs on a dedicated connection (a pooled one could be handed to someone else mid-LISTEN). After every
(re)connect it LISTENs *first* and only then wakes the claimer for a catch-up claim, so that a retire
committed in between is either seen by that claim or arrives as a notification. A notification can
still be lost without the socket noticing (a proxy or a half-open TCP connection), so once
``notify_check_interval`` has passed without any notification heard, the listener sends itself a NOTIFY
from another session and expects it back; when it does not come, the connection is replaced.
Meanwhile the poll keeps draining. A retire's NOTIFY names the replica that armed the wakeup flag
(migration 0018): the others pass over it, and over each other's pings, so one retire wakes one
sleeping replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import failpoints, periodic
from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.errors import DatabaseUnavailable, first_line
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.store import db
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep import channel


class ListenerDeaf(Exception):
    """The NOTIFY round-trip did not come back in time."""


class Listener:
    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Connection],
        wake: Callable[[str], None],
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.wake = wake
        self.metrics = metrics or Metrics()
        # Whether the connection hears. The rule: written by the event loop only (this task), read by
        # any thread (the HTTP thread's /readyz and the listener gauge); one attribute, stored and
        # loaded whole, so a reader sees the value before or after a change, never a mix.
        self.healthy = False
        self.listening = asyncio.Event()  # set once the first LISTEN is in place
        self._pings = itertools.count(1)
        self._backoff = Backoff.for_reconnects(settings.backoff_base, settings.backoff_max)

    async def run(self) -> None:
        failures = 0
        while True:
            conn: Connection | None = None
            try:
                conn = await db.connect(
                    self.settings, application_name="pod-sweeper-listener", conninfo=self.settings.listen_conninfo()
                )
                await channel.listen(conn, cluster=self.settings.cluster)
                self.healthy = True
                self.listening.set()
                failures = 0
                self.wake("listen")  # catch up on whatever committed while we were not listening
                await self._listen(conn)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, ListenerDeaf, OSError, DatabaseUnavailable) as exc:
                self.healthy = False
                failures += 1
                self.metrics.listener_reconnects.inc()
                delay = self._backoff.delay(failures)
                logger.warning(
                    "listener lost ({error}); reconnecting in {delay:.1f} s, polling meanwhile",
                    error=first_line(exc),
                    delay=delay,
                )
                await periodic.pause(delay)
            finally:
                self.healthy = False
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()

    async def _listen(self, conn: Connection) -> None:
        interval = self.settings.notify_check_interval
        next_ping = time.monotonic() + interval
        expected: str | None = None
        expected_by = 0.0
        while True:
            timeout = max(0.05, min(next_ping, expected_by if expected else next_ping) - time.monotonic())
            async for notify in conn.notifies(timeout=timeout):
                failpoints.hit("listener")
                if expected is not None and notify.payload == expected:
                    expected = None
                    continue
                # Any notification heard proves the connection delivers them, as our own ping would:
                # the next one is due an interval after it. Replicas that hear each other's pings (and
                # retires) send about one ping an interval between them, not one each.
                if expected is None:
                    next_ping = time.monotonic() + interval
                # Another replica's ping, or a retire that woke the replica the wakeup flag names
                # (migration 0018): not this one's to claim.
                if channel.wakes(notify.payload, replica=self.settings.replica_id):
                    self.wake("notify")
            now = time.monotonic()
            if expected is not None and now >= expected_by:
                raise ListenerDeaf(f"our own NOTIFY did not come back within {interval:g} s")
            if expected is None and now >= next_ping:
                expected = f"{channel.PING_PREFIX}{self.settings.replica_id}:{next(self._pings)}"
                expected_by = now + interval
                next_ping = now + interval
                async with self.pool.connection() as other:
                    await channel.notify(other, expected, cluster=self.settings.cluster)
