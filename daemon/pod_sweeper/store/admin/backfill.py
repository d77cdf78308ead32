"""``pod-sweeper backfill``: enqueue the retirements the trigger never saw (rows retired before
``attach``), so that "retired implies pod deleted" holds for the past too.

Backfill enqueues exactly as the trigger does: the same condition (a retired row that names a UID) and
the same call of ``pod_sweeper.enqueue``, both from ``store.admin.enqueue_rule``, so a row the trigger would
reject (a NULL or empty field, a malformed UID, an empty cluster) is recorded in
``pod_sweeper.rejects`` here too, with ``reason = 'backfill'``, and counted in the result. One
statement per attached table, in the caller's transaction; a UID that already has an outbox row (open
or finished), or a row backfill rejected before, is left alone, so it is idempotent. ``dry_run`` runs
the same statement and rolls it back: its counts are what a real run would do now.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from psycopg import sql

from pod_sweeper.store.admin import attach, enqueue_rule
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep.recheck import Attachment, load_attachments

REASON = "backfill"
SAMPLE = 20


@dataclass
class BackfillResult:
    table: str
    seen: int = 0  # retired rows with a UID the outbox lacked
    enqueued: int = 0
    rejected: Counter[str] = field(default_factory=Counter)  # problem -> rows (pod_sweeper.rejects)
    sample: list[tuple[str, ...]] = field(default_factory=list)


def _missing(rule: enqueue_rule.Rule, attachment: Attachment) -> sql.Composed:
    """FROM and WHERE of the host rows to enqueue: retired with a UID (the trigger's condition), whose
    UID the outbox lacks and which backfill has not rejected before."""
    uid = sql.SQL("t.{}").format(sql.Identifier(rule.mapping["pod_uid"]))
    as_uuid = uid if rule.uid_is_uuid else sql.SQL("pod_sweeper.try_uuid({}::text)").format(uid)
    return sql.SQL(
        "FROM {table} AS t WHERE {retired}"
        " AND NOT EXISTS (SELECT 1 FROM pod_sweeper.outbox AS o WHERE o.pod_uid = {as_uuid})"
        " AND NOT EXISTS (SELECT 1 FROM pod_sweeper.rejects AS r WHERE r.attachment_id = {id} AND r.reason = {reason}"
        " AND r.sandbox_id IS NOT DISTINCT FROM left({sid}, 1000) AND r.generation IS NOT DISTINCT FROM {gen}"
        " AND r.pod_uid IS NOT DISTINCT FROM left({uid}::text, 1000))"
    ).format(
        table=attachment.identifier,
        retired=rule.retired("t"),
        as_uuid=as_uuid,
        id=sql.Literal(rule.attachment_id),
        reason=sql.Literal(REASON),
        sid=rule.value("sandbox_id", "t"),
        gen=rule.value("generation", "t"),
        uid=uid,
    )


async def _backfill_one(conn: Connection, attachment: Attachment, *, dry_run: bool) -> BackfillResult:
    result = BackfillResult(attachment.identifier.as_string(conn))
    types = await attach.column_types(conn, attach.HostTable(*attachment.table))
    rule = enqueue_rule.Rule(attachment.id, attachment.columns, types, attachment.cluster)
    missing = _missing(rule, attachment)
    cluster = rule.value("cluster", "t") if "cluster" in rule.mapping else sql.Literal(rule.cluster)
    columns = [rule.value(role, "t") for role in ("sandbox_id", "generation", "pod_namespace", "pod_name")]
    shown = sql.SQL("SELECT {}, t.{}::text, {} {} LIMIT {}").format(
        sql.SQL(", ").join(columns), sql.Identifier(rule.mapping["pod_uid"]), cluster, missing, sql.Literal(SAMPLE)
    )
    result.sample = [tuple(map(str, row.values())) for row in await (await conn.execute(shown)).fetchall()]
    # The statement has no parameters: the composed names reach the server as they are. The call is a
    # lateral join, so it runs for the rows the conditions kept and for no other.
    enqueue = sql.SQL("SELECT count(*) AS seen FROM (SELECT t.* {}) AS t CROSS JOIN LATERAL {} AS e").format(
        missing, rule.call("t", REASON)
    )
    async with conn.transaction(force_rollback=dry_run):
        row = await (await conn.execute(enqueue)).fetchone()
        result.seen = int(row["seen"]) if row else 0
        # What this transaction did (now() is its start, the default of both tables' times).
        counted = await conn.execute(
            "SELECT count(*) AS n FROM pod_sweeper.outbox"
            " WHERE attachment_id = %s AND reason = %s AND enqueued_at = now()",
            (attachment.id, REASON),
        )
        result.enqueued = int((await counted.fetchone() or {"n": 0})["n"])
        problems = await conn.execute(
            "SELECT problem, count(*) AS n FROM pod_sweeper.rejects"
            " WHERE attachment_id = %s AND reason = %s AND rejected_at = now() GROUP BY problem",
            (attachment.id, REASON),
        )
        result.rejected.update({r["problem"]: int(r["n"]) for r in await problems.fetchall()})
    return result


async def backfill(conn: Connection, *, dry_run: bool = False) -> list[BackfillResult]:
    """Enqueue (with ``dry_run``: only count and sample) every retired row the outbox lacks, in the
    caller's transaction."""
    return [
        await _backfill_one(conn, attachment, dry_run=dry_run)
        for attachment in (await load_attachments(conn)).values()
        if attachment.present
    ]
