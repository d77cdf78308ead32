"""The re-check: at claim time, is the execution row behind an outbox row still retired?

DESIGN.md's rule: delete only if the row for (sandbox_id, generation) is inactive or gone; an active
row means a newer activation owns the pod, and the outbox row ends ``skipped_active``. The lookup goes
through each attachment's column mapping, one query per attachment per claim batch, with the keys
cast to the host columns' own types so that the host's primary key index serves it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from pod_sweeper import queries
from pod_sweeper.db import Connection


@dataclass(frozen=True)
class Attachment:
    id: int
    schema: str
    table: tuple[str, str]  # schema, name
    columns: dict[str, str]
    sandbox_id_type: str | None
    generation_type: str | None

    @property
    def identifier(self) -> sql.Identifier:
        """The host table's name, for statements without parameters (see ``queries.name_in_parameterized``)."""
        return sql.Identifier(*self.table)

    @property
    def present(self) -> bool:
        return self.sandbox_id_type is not None and self.generation_type is not None


async def load_attachments(conn: Connection) -> dict[int, Attachment]:
    rows = await (await conn.execute(queries.load("attachments"))).fetchall()
    return {
        r["id"]: Attachment(
            r["id"],
            r["table_schema"],
            (r["table_schema"], r["table_name"]),
            r["column_map"],
            r["sandbox_id_type"],
            r["generation_type"],
        )
        for r in rows
    }


def _active_query(attachment: Attachment) -> sql.Composed:
    cols = attachment.columns
    name = queries.name_in_parameterized
    assert attachment.sandbox_id_type and attachment.generation_type
    # The types come from pg_catalog (format_type quotes what needs quoting), not from user input.
    return sql.SQL(
        "SELECT k.id FROM unnest(%s::bigint[], %s::text[], %s::bigint[]) AS k(id, sandbox_id, generation)"
        " JOIN {table} AS t ON t.{sid} = k.sandbox_id::{sid_type} AND t.{gen} = k.generation::{gen_type}"
        " WHERE t.{active}"
    ).format(
        table=name(*attachment.table),
        sid=name(cols["sandbox_id"]),
        gen=name(cols["generation"]),
        active=name(cols["active"]),
        sid_type=queries.for_parameterized(attachment.sandbox_id_type),
        gen_type=queries.for_parameterized(attachment.generation_type),
    )


@dataclass
class Verdict:
    active: set[int]  # outbox ids whose execution row is active again: never delete
    unknown: dict[int, str]  # outbox ids that could not be checked, with why: retry later


async def recheck(conn: Connection, rows: list[Any], attachments: dict[int, Attachment]) -> Verdict:
    """Check claimed rows (each with id, attachment_id, sandbox_id, generation) inside the caller's
    transaction; a failing lookup is contained in a savepoint and leaves only its own rows unknown."""
    verdict = Verdict(set(), {})
    if any(row.attachment_id not in attachments for row in rows):
        # An attachment made after this process started: refresh the cache in place.
        attachments.update(await load_attachments(conn))
    groups: dict[int, list[Any]] = defaultdict(list)
    for row in rows:
        groups[row.attachment_id].append(row)
    for attachment_id, group in groups.items():
        attachment = attachments.get(attachment_id)
        if attachment is None or not attachment.present:
            for row in group:
                verdict.unknown[row.id] = f"attachment {attachment_id}: its table or key columns are gone"
            continue
        try:
            async with conn.transaction():
                cur = await conn.execute(
                    _active_query(attachment),
                    ([r.id for r in group], [r.sandbox_id for r in group], [r.generation for r in group]),
                )
                verdict.active.update(r["id"] for r in await cur.fetchall())
        except (psycopg.errors.DataError, psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
            # A key that no longer casts to the host's type, a dropped table or column: uncertain, so
            # those rows wait for a retry (and an operator) rather than being deleted or dropped.
            for row in group:
                verdict.unknown[row.id] = f"re-check failed: {str(exc).strip().splitlines()[0]}"
    return verdict
