"""``pod-sweeper backfill``: enqueue the retirements the trigger never saw (rows retired before
``attach``), so that "retired implies pod deleted" holds for the past too.

One streaming pass over each attached table's retired rows that name a pod UID, inserted in batches
as ``reason = 'backfill'``; the unique pod UID makes it idempotent (a UID that already has an outbox
row, open or finished, is left alone). ``--dry-run`` lists what it would enqueue.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from psycopg import sql
from psycopg.rows import tuple_row

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection
from pod_sweeper.store.recheck import Attachment, load_attachments


@dataclass
class BackfillResult:
    table: str
    seen: int = 0
    enqueued: int = 0
    sample: list[tuple[str, ...]] = field(default_factory=list)


def _candidates(attachment: Attachment, uid_is_uuid: bool) -> sql.Composed:
    cols = {role: sql.Identifier(name) for role, name in attachment.columns.items()}
    uid = (
        sql.SQL("t.{}").format(cols["pod_uid"])
        if uid_is_uuid
        else sql.SQL("pod_sweeper.try_uuid(t.{}::text)").format(cols["pod_uid"])
    )
    cluster = sql.SQL("t.{}::text").format(cols["cluster"]) if "cluster" in cols else sql.Literal(attachment.cluster)
    return sql.SQL(
        "SELECT t.{sid}::text, t.{gen}::bigint, t.{ns}::text, t.{name}::text, {uid}, {cluster} FROM {table} AS t"
        " WHERE NOT t.{active} AND t.{raw_uid} IS NOT NULL"
        " AND NOT EXISTS (SELECT 1 FROM pod_sweeper.outbox AS o WHERE o.pod_uid = {uid})"
    ).format(
        sid=cols["sandbox_id"],
        gen=cols["generation"],
        ns=cols["pod_namespace"],
        name=cols["pod_name"],
        uid=uid,
        cluster=cluster,
        table=attachment.identifier,
        active=cols["active"],
        raw_uid=cols["pod_uid"],
    )


_INSERT = sql.SQL(
    "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
    " reason, cluster) SELECT %s, s, g, n, p, u, 'backfill', c"
    " FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[], %s::uuid[], %s::text[]) AS x(s, g, n, p, u, c)"
    " WHERE u IS NOT NULL AND nullif(c, '') IS NOT NULL ON CONFLICT (pod_uid) DO NOTHING"
    " RETURNING cluster AS c"
)


async def backfill(conn: Connection, *, batch: int = 1000, dry_run: bool = False) -> list[BackfillResult]:
    """Enqueue (or with ``dry_run`` only count and sample) every retired row the outbox lacks."""
    results = []
    for attachment in (await load_attachments(conn)).values():
        if not attachment.present:
            continue
        cur = await conn.execute(
            "SELECT t.typname = 'uuid' AS is_uuid FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
            " WHERE a.attrelid = %s::regclass AND a.attname = %s",
            (attachment.identifier.as_string(conn), attachment.columns["pod_uid"]),
        )
        row = await cur.fetchone()
        result = BackfillResult(attachment.identifier.as_string(conn))
        clusters: Counter[str] = Counter()
        # A server-side cursor streams the candidates: one pass, flat memory, however large the table.
        async with conn.transaction(), conn.cursor(name="pod_sweeper_backfill", row_factory=tuple_row) as candidates:
            await candidates.execute(_candidates(attachment, bool(row and row["is_uuid"])))
            while rows := await candidates.fetchmany(batch):
                result.seen += len(rows)
                if dry_run:
                    result.sample += [tuple(map(str, r)) for r in rows[: max(0, 20 - len(result.sample))]]
                    continue
                columns = list(zip(*rows, strict=True))
                inserted = await conn.execute(_INSERT, (attachment.id, *map(list, columns)))
                clusters.update(r["c"] for r in await inserted.fetchall())
            result.enqueued = sum(clusters.values())
            for cluster in clusters:  # wake each cluster's sweepers, on its own channel
                await conn.execute(queries.load("notify"), queries.notify_params(cluster=cluster))
        results.append(result)
    return results
