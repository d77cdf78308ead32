"""Bulk actions on outbox rows (``pod-sweeper retry`` and ``discard``): the rows a set of filters
matches, read a page at a time, and the two actions, each on a list of ids in the caller's (short)
transaction, which checks each row's status again. Claims use SKIP LOCKED, so a page being changed
never holds one up, and no statement here locks more than a page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from pod_sweeper.core.states import Status
from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection

PAGE = 500  # rows per read and per action's transaction


@dataclass(frozen=True)
class Filters:
    """What a bulk action matches; a filter left None (or no ids) does not narrow."""

    statuses: tuple[Status, ...]
    cluster: str | None = None
    namespace: str | None = None
    outcome: str | None = None
    contains: str | None = None  # a substring of last_error
    older_than: float | None = None  # seconds since the row last changed
    ids: tuple[int, ...] = ()

    def params(self) -> dict[str, Any]:
        return {
            "statuses": [s.value for s in self.statuses],
            "cluster": self.cluster,
            "namespace": self.namespace,
            "outcome": self.outcome,
            "contains": self.contains,
            "older_than": self.older_than,
            "ids": list(self.ids),
        }


async def matching(conn: Connection, filters: Filters, *, page: int = PAGE) -> AsyncIterator[list[dict[str, Any]]]:
    """Every row the filters match, a page at a time in id order."""
    after = 0
    while True:
        params = {**filters.params(), "after": after, "page": page}
        rows = list(await (await conn.execute(queries.load("bulk_match"), params)).fetchall())
        if not rows:
            return
        yield rows
        after = rows[-1]["id"]


async def retry(conn: Connection, ids: list[int], *, who: str) -> list[int]:
    """Reopen these rows (still dead or done) with attempts reset; the ids reopened."""
    cur = await conn.execute(queries.load("retry"), {"ids": ids, "who": who})
    return sorted(r["id"] for r in await cur.fetchall())


async def discard(conn: Connection, ids: list[int]) -> list[int]:
    """End these rows (still pending or dead) as done, outcome 'discarded'; the ids discarded."""
    cur = await conn.execute(queries.load("discard"), {"ids": ids})
    return sorted(r["id"] for r in await cur.fetchall())
