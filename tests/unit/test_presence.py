"""The heartbeat's rule of when to write a replica's row (tasks/loops/presence.py), without I/O: a look
whose row says what the last write said writes nothing, until REFRESH_LOOKS looks have passed (the row's
seen_at); a change (readiness, a reason rows wait) is written at the next look, a reason's particulars
moving is not; a failed write is tried again at the next look; nothing is written after a stop's mark."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core.settings import Settings
from pod_sweeper.core.waits import Wait
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep.presence import Beat
from pod_sweeper.tasks.loops import presence
from pod_sweeper.tasks.loops.presence import Presence

pytestmark = pytest.mark.unit


class Recorded(Presence):
    """The real Presence, its one write recorded (and failing when told) instead of sent."""

    def __init__(self, state: dict[str, Any]) -> None:
        settings = Settings(database_url="postgresql://unused", replica_id="r1", cluster="east")
        pool: AsyncConnectionPool[Connection] = AsyncConnectionPool("postgresql://unused", open=False)  # never opened
        super().__init__(settings, pool, state=lambda: (state["ready"], state["waits"]))
        self.written: list[Beat] = []
        self.failing = False

    async def beat(self, now: Beat) -> bool:
        if self.failing:
            return False
        self.written.append(now)
        return True


def test_a_row_is_written_on_a_change_and_otherwise_every_refresh_looks() -> None:
    asyncio.run(_looks())


async def _looks() -> None:
    waits: Mapping[Wait, str] = {}
    state: dict[str, Any] = {"ready": False, "waits": waits}
    replica = Recorded(state)
    await replica.look()  # the first look writes
    assert len(replica.written) == 1 and replica.written[0].ready is False
    assert replica.written[0].heartbeat_seconds == presence.PRESENCE_SECONDS * presence.REFRESH_LOOKS
    await replica.look()
    assert len(replica.written) == 1  # nothing changed
    state["ready"] = True
    await replica.look()  # a change: written at once
    assert [b.ready for b in replica.written] == [False, True]
    for _ in range(presence.REFRESH_LOOKS - 1):
        await replica.look()
    assert len(replica.written) == 2
    await replica.look()  # REFRESH_LOOKS looks since the last write: written again, unchanged
    assert len(replica.written) == 3 and replica.written[2].ready is True
    state["waits"] = {Wait.PAUSED: "the whole cluster"}
    replica.failing = True
    await replica.look()
    replica.failing = False
    await replica.look()  # the failed write is tried again
    assert replica.written[-1].waits == {"paused": "the whole cluster"}
    written = len(replica.written)
    state["waits"] = {Wait.PAUSED: "the whole cluster, for 2 s more"}  # a reason's particulars move
    await replica.look()
    assert len(replica.written) == written  # not a change: written at the next refresh
    await replica.leave()  # (its mark fails here: no database; it is logged, and the stop goes on)
    for _ in range(presence.REFRESH_LOOKS + 1):
        await replica.look()
    assert len(replica.written) == written  # nothing after the stop's mark: the row stays stopped
