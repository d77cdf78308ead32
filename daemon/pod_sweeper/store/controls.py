"""An on-call's controls and their audit trail (migration 0011): pauses of a scope, holds of a pod,
and the one row in ``pod_sweeper.audit`` each operator action writes in its own transaction.

Every function here that changes something takes the connection of a transaction the caller opened,
and writes the audit row inside it: the action and its record commit together or not at all. The
claim reads pauses and holds itself (sql/claim.sql); nothing here is on the daemon's hot path.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
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


async def pause(
    conn: Connection, *, cluster: str, namespace: str, until: datetime, reason: str, actor: str
) -> datetime:
    """Pause the scope until ``until`` (namespace ``WHOLE_CLUSTER``: every namespace); when it began."""
    params = {"cluster": cluster, "namespace": namespace, "until": until, "reason": reason, "actor": actor}
    row = await (await conn.execute(queries.load("pause"), params)).fetchone()
    assert row is not None
    return row["since"]  # type: ignore[no-any-return]


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
    until: datetime,
    reason: str,
    actor: str,
) -> datetime:
    """Hold one pod's rows until ``until``; when the hold began."""
    params = {
        "cluster": cluster,
        "namespace": namespace,
        "name": name,
        "uid": uid,
        "until": until,
        "reason": reason,
        "actor": actor,
    }
    row = await (await conn.execute(queries.load("hold"), params)).fetchone()
    assert row is not None
    return row["since"]  # type: ignore[no-any-return]


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
