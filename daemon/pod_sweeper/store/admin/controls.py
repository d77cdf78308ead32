"""An on-call's controls and their audit trail (migration 0011): pauses of a scope, holds of a pod, the
end of a large host transaction the breaker's rule keeps back (migration 0020), and the one row in
``pod_sweeper.audit`` each operator action writes in its own transaction.

Every function here that changes something takes the connection of a transaction the caller opened,
and writes the audit row inside it: the action and its record commit together or not at all. The
claim reads pauses and holds itself (sql/claim.sql); nothing here is on the daemon's hot path.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection

WHOLE_CLUSTER = ""  # a pause's pod_namespace for the whole cluster


@dataclass(frozen=True)
class Action:
    """Who did what: the audit row's actor, command, arguments and scope."""

    actor: str
    command: str
    arguments: dict[str, Any]
    scope: str


@dataclass(frozen=True)
class Window:
    """When a pause or a hold ends: at ``until``, or ``length`` from the database's ``now()`` (one of
    the two). The database computes it, so the clock of the machine that runs the command plays no part."""

    until: datetime | None = None
    length: timedelta | None = None

    def params(self) -> dict[str, Any]:
        return {"until": self.until, "seconds": self.length.total_seconds() if self.length is not None else None}

    def arguments(self) -> dict[str, Any]:
        """What the audit trail keeps of how it was asked for."""
        return {"for_seconds": self.length.total_seconds()} if self.length is not None else {}


@dataclass(frozen=True)
class InFlight:
    """Rows of a scope a replica holds right now, and when the last of their leases ends."""

    rows: int
    last_lease_ends: datetime | None


async def audit(conn: Connection, action: Action, affected: int) -> int:
    """Write ``action`` to the audit trail (in the caller's transaction); its id."""
    params = {
        "actor": action.actor,
        "command": action.command,
        "arguments": json.dumps(action.arguments, default=str, sort_keys=True),
        "scope": action.scope,
        "affected": affected,
    }
    row = await (await conn.execute(queries.load("audit_record"), params)).fetchone()
    assert row is not None
    return int(row["id"])


async def name_command(conn: Connection, action: Action) -> None:
    """Name the command and its operator for the rest of the caller's transaction: the trail rows the
    database writes itself (a pause or a hold that ends, migration 0012) carry them. Transaction-scoped,
    so nothing of it is left on a pooled server connection."""
    await conn.execute(queries.load("name_command"), {"actor": action.actor, "command": action.command})


async def pause(
    conn: Connection, *, cluster: str, namespace: str, window: Window, reason: str, actor: str
) -> datetime | None:
    """Pause the scope (namespace ``WHOLE_CLUSTER``: every namespace) for ``window``; when it ends,
    or None (nothing written) when the window's ``until`` has passed by the database's clock."""
    params = {"cluster": cluster, "namespace": namespace, "reason": reason, "actor": actor, **window.params()}
    row = await (await conn.execute(queries.load("pause"), params)).fetchone()
    return None if row is None else row["until"]


async def unpause(conn: Connection, *, cluster: str, namespace: str) -> bool:
    """End the scope's pause; whether one was in force."""
    rows = await (await conn.execute(queries.load("unpause"), {"cluster": cluster, "namespace": namespace})).fetchall()
    return any(r["was_active"] for r in rows)


async def hold(
    conn: Connection,
    *,
    cluster: str,
    namespace: str,
    name: str,
    uid: uuid.UUID | None,
    window: Window,
    reason: str,
    actor: str,
) -> datetime | None:
    """Hold one pod's rows for ``window``; when the hold ends, or None as for :func:`pause`."""
    params = {
        "cluster": cluster,
        "namespace": namespace,
        "name": name,
        "uid": uid,
        "reason": reason,
        "actor": actor,
        **window.params(),
    }
    row = await (await conn.execute(queries.load("hold"), params)).fetchone()
    return None if row is None else row["until"]


async def release(conn: Connection, *, cluster: str, namespace: str, name: str) -> bool:
    """End a pod's hold; whether one was in force."""
    params = {"cluster": cluster, "namespace": namespace, "name": name}
    rows = await (await conn.execute(queries.load("release"), params)).fetchall()
    return any(r["was_active"] for r in rows)


async def in_flight(conn: Connection, *, cluster: str, namespace: str, name: str | None = None) -> InFlight:
    """Rows of the scope (or of one pod) claimed right now, which a pause or a hold does not recall."""
    params = {"cluster": cluster, "namespace": namespace, "name": name}
    row = await (await conn.execute(queries.load("in_flight"), params)).fetchone()
    assert row is not None
    return InFlight(int(row["n"]), row["last_lease_ends"])


async def in_force(conn: Connection) -> list[dict[str, Any]]:
    """The pauses and holds in force, soonest end first (``status``)."""
    return list(await (await conn.execute(queries.load("status_controls"))).fetchall())


async def prune_audit(conn: Connection, *, keep_seconds: float) -> int:
    """Delete audit rows older than ``keep_seconds`` (never younger than 30 days: the database's rule);
    how many."""
    row = await (await conn.execute(queries.load("audit_prune"), {"keep": f"{keep_seconds} seconds"})).fetchone()
    return int(row["deleted"]) if row else 0


async def large_transactions(conn: Connection) -> list[dict[str, Any]]:
    """The large host transactions kept back now, oldest found first (``status``, the gauges)."""
    return [dict(r) for r in await (await conn.execute(queries.load("status_large_transactions"))).fetchall()]


async def large_transaction_rows(conn: Connection, transaction: int, *, limit: int) -> list[dict[str, Any]]:
    """A preview of a large transaction's open rows (``limit`` of them)."""
    cur = await conn.execute(queries.load("large_transaction_rows"), {"id": transaction, "limit": limit})
    return [dict(r) for r in await cur.fetchall()]


async def end_transaction(conn: Connection, transaction: int, *, how: str, actor: str) -> dict[str, Any] | None:
    """End a large transaction's wait: ``released`` (its rows go) or ``discarded`` (its pending rows end
    as done, outcome discarded); its cluster and open rows, or None when it is unknown or ended already."""
    params = {"id": transaction, "how": how, "actor": actor}
    row = await (await conn.execute(queries.load("large_transaction_end"), params)).fetchone()
    return None if row is None else dict(row)


async def prune_large_transactions(conn: Connection, *, keep_seconds: float) -> int:
    """Delete the large transactions ended longer ago than ``keep_seconds``; how many."""
    return (await conn.execute(queries.load("large_transaction_prune"), {"keep_seconds": keep_seconds})).rowcount
