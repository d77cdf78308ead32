"""The outage watch's row in the simulator: why the waits invariant can check ``kube_unreachable``.

The daemon's ``OutageWatch`` writes a row of ``pod_sweeper.outages`` while its gate is closed (the
report, renewed at each failed probe) and deletes it when the API server answers again (and at start, a
row a previous process of the same replica left), and sql/row_waits.sql gives every open row of the
cluster the reason ``kube_unreachable`` while a report was probed within 2 minutes. ``OutagePool`` is the
watch's pool: its two statements, sql/outage_report.sql and sql/outage_clear.sql, are the memory store's
``report_outage`` and ``clear_outage`` (held to them by tests/integration/test_store_contract.py), and the
world notes when each report was last probed, on the database's clock (``Reports``), which
``a_waiting_rows_reason_agrees_with_its_state`` reads as what it knows of the outage.

Each statement applies at once, with no round trip and no fault: a round trip would add a step to the
start of every run (the watch clears its row first) and move every seed's schedule, and the row decides
nothing the sweep does (claims do not read it); a replica killed mid-outage leaves its report, stale two
minutes on, as PostgreSQL would.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

from harness.memstore import OUTAGE_FRESH_SECONDS, MemoryStore
from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection


class Reports:
    """What the world knows of the outage rows: each replica's report and when it was last probed (the
    database's clock); the note it makes of each change."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self.probed: dict[str, float] = {}  # replica -> when its report was last probed
        self._note = note

    def unreachable(self, now: float) -> bool:
        """Whether a report keeps the rows now: one probed within the last 2 minutes."""
        return any(at > now - OUTAGE_FRESH_SECONDS for at in self.probed.values())

    def reported(self, replica: str, at: float, reason: str) -> None:
        first = replica not in self.probed
        self.probed[replica] = at
        if first:
            self._note(f"{replica} outage row reported: {reason}")

    def cleared(self, replica: str) -> None:
        if self.probed.pop(replica, None) is not None:
            self._note(f"{replica} outage row cleared")


class _Cursor:
    async def fetchone(self) -> dict[str, Any] | None:
        return None


class OutagePool:
    """One replica's outage watch's pool: sql/outage_report.sql and sql/outage_clear.sql on the memory
    store, each applied at once (see above)."""

    def __init__(self, memory: MemoryStore, reports: Reports, clock: Callable[[], float]) -> None:
        self.memory, self.reports, self.clock = memory, reports, clock

    def connection(self) -> AbstractAsyncContextManager[Connection]:
        return self._connection()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        yield cast(Connection, self)

    async def execute(self, query: str, params: dict[str, Any]) -> _Cursor:
        where = {"cluster": params["cluster"], "replica": params["replica"]}
        if query == queries.load("outage_report"):
            self.memory.report_outage(**where, reason=params["reason"], closed_for=params["closed_for"])
            self.reports.reported(params["replica"], self.clock(), params["reason"])
        elif query == queries.load("outage_clear"):
            self.memory.clear_outage(**where)
            self.reports.cleared(params["replica"])
        else:
            raise AssertionError(f"the simulator's outage watch knows no statement {query[:60]!r}")
        return _Cursor()
