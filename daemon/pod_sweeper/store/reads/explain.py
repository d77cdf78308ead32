"""What ``pod-sweeper explain POD|UID|SANDBOX_ID`` reads: everything the database knows of one pod (the
execution rows in every attached table, the outbox row with every attempt and its answer, any
reconciliation suspect, the tripped breakers, the pauses and holds in force, why each open row waits),
as plain data. What happens next, and the text for people, are ``cli.explain_text``'s.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection
from pod_sweeper.store.reads import replicas, waits
from pod_sweeper.store.sweep.recheck import Attachment, host_names, load_attachments

OPEN = ("pending", "claimed")


@dataclass(frozen=True)
class Target:
    """What the operator named: a pod UID, a pod (``namespace/name`` or a bare name), or a sandbox id.
    A bare word may be either a pod name or a sandbox id; both are looked up."""

    uid: str | None = None
    namespace: str | None = None
    name: str | None = None
    sandbox: str | None = None

    @classmethod
    def parse(cls, text: str) -> Target:
        try:
            return cls(uid=str(uuid.UUID(text)))
        except ValueError:
            pass
        if "/" in text:
            namespace, name = text.split("/", 1)
            return cls(namespace=namespace, name=name)
        return cls(name=text, sandbox=text)

    def params(self) -> dict[str, str | None]:
        return asdict(self)


@dataclass
class Story:
    """Everything the database knows of the pods ``target`` names."""

    target: str
    executions: list[dict[str, Any]] = field(default_factory=list)
    outbox: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    suspects: list[dict[str, Any]] = field(default_factory=list)
    breakers: list[dict[str, Any]] = field(default_factory=list)  # the tripped ones
    controls: list[dict[str, Any]] = field(default_factory=list)  # pauses and holds in force
    # The replicas whose settings decide the fate of each row's cluster (store/reads/replicas.py:deciding),
    # as their heartbeats last wrote them: the guard and dry run come from here, never the reader's settings.
    replicas: list[dict[str, Any]] = field(default_factory=list)


def _executions_query(attachment: Attachment, *, keyed: bool) -> sql.Composed:
    """The host table's rows of the pod. Keyed: by the sandbox ids pod-sweeper's own rows name, cast to
    the host column's type so that the host's key index serves it. Otherwise (pod-sweeper holds no row
    of the pod, so no key is known) by its UID or name: the host's table read as its indexes allow, the
    one read here that pod-sweeper cannot bound (the table is the host's)."""
    names = host_names(attachment)
    if keyed:
        where = sql.SQL("{sid} = ANY(%(sandboxes)s::text[]::{sid_type}[])").format(**names)
    else:
        where = sql.SQL(
            "{uid}::text = %(uid)s OR ({pod}::text = %(name)s AND {ns}::text = coalesce(%(namespace)s, {ns}::text))"
        ).format(**names)
    return sql.SQL(
        "SELECT {sid}::text AS sandbox_id, {gen}::text AS generation, {ns}::text AS pod_namespace,"
        " {pod}::text AS pod_name, {uid}::text AS pod_uid, {active} AS active FROM {table} WHERE {where} LIMIT 20"
    ).format(where=where, **names)


async def gather(conn: Connection, text: str) -> Story:
    """The story of what ``text`` names. The replicas' settings (the replication guard, dry run) are read
    from their own rows, so the story is the same from any shell."""
    target = Target.parse(text)
    params = target.params()
    story = Story(text)
    story.outbox = [dict(r) for r in await (await conn.execute(queries.load("explain_outbox"), params)).fetchall()]
    for row in story.outbox:  # what keeps each row back, as the claim sees it
        where = {"cluster": row["cluster"], "namespace": row["pod_namespace"], "name": row["pod_name"]}
        keys = {"uid": row["pod_uid"], "enqueued_at": row["enqueued_at"]}
        cur = await conn.execute(queries.load("explain_keeping"), {**where, **keys})
        row["kept"] = [dict(r) for r in await cur.fetchall()]
    ids = [r["id"] for r in story.outbox]
    reasons = await waits.row_reasons(conn, [r["id"] for r in story.outbox if r["status"] in OPEN])
    for row in story.outbox:  # why each open row waits (core.waits), as status and the metrics count it
        row["wait"] = reasons.get(row["id"])
    if ids:
        cur = await conn.execute(queries.load("explain_attempts"), {"ids": ids})
        story.attempts = [dict(r) for r in await cur.fetchall()]
    story.suspects = [dict(r) for r in await (await conn.execute(queries.load("explain_suspects"), params)).fetchall()]
    found: set[str] = {str(r["sandbox_id"]) for r in story.outbox + story.suspects}
    sandboxes = sorted(found | ({target.sandbox} if target.sandbox else set()))
    for attachment in (await load_attachments(conn)).values():
        if not attachment.present:
            continue
        # By key when there is one; by UID or name only when pod-sweeper holds no row of the pod.
        for keyed in [True] * bool(sandboxes) + [False] * (not found):
            try:
                async with conn.transaction():  # a host table that changed under us fails this lookup alone
                    cur = await conn.execute(
                        _executions_query(attachment, keyed=keyed), {**params, "sandboxes": sandboxes}
                    )
                    rows = await cur.fetchall()
            except psycopg.errors.DataError:  # a word that is no sandbox id of this table's type
                continue
            story.executions += [{"table": ".".join(attachment.table), **r} for r in rows]
            if rows:
                break
    rows = await (await conn.execute(queries.load("status_breaker"))).fetchall()
    story.breakers = [dict(r) for r in rows if r["tripped_at"] is not None]
    story.controls = [dict(r) for r in await (await conn.execute(queries.load("status_controls"))).fetchall()]
    known = await replicas.known(conn)
    for cluster in sorted({r["cluster"] for r in story.outbox}):
        story.replicas += [{**asdict(r), "settings": r.settings()} for r in replicas.deciding(known, cluster)]
    for row in story.outbox:  # the standbys the deciding replicas' guards name, for the guard's reason
        deciding = replicas.deciding(known, row["cluster"])
        row["guards"] = sorted({", ".join(r.guard) for r in deciding if r.guard})
    return story
