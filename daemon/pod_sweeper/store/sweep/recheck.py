"""The re-check: at claim time, is the execution row behind an outbox row still retired?

docs/design.md's rule: delete only if the row for (sandbox_id, generation) is inactive or gone; an active
row means a newer activation owns the pod, and the outbox row ends ``skipped_active``. The lookup goes
through each attachment's column mapping, one query per attachment per claim batch, with the keys
cast to the host columns' own types so that the host's primary key index serves it.

The reconciliation pass asks the same tables a wider question (``generations``): for a pod's labels,
is there an active row, only retired rows, or no row at all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, LiteralString, cast

import psycopg
from psycopg import sql

from pod_sweeper.core.errors import first_line
from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection
from pod_sweeper.store.interface import StoreError
from pod_sweeper.store.rows import AttachedTable

# What the re-check finds is store/rows.py's (data, no database library there); named here too, where the
# claimer reads it from.
from pod_sweeper.store.rows import Recheck as Recheck


@dataclass(frozen=True)
class Attachment(AttachedTable):
    """An attached host table as ``load_attachments`` reads it: the data (``rows.AttachedTable``) and the
    table's name as SQL."""

    @property
    def identifier(self) -> sql.Identifier:
        """The host table's name, for statements without parameters (see ``queries.name_in_parameterized``)."""
        return sql.Identifier(*self.table)


# The re-check's statement of each attachment as loaded (its id, table, columns and key types): composed
# once, since a claim runs it every time. Attachments are few and rarely change.
_ACTIVE: dict[tuple[object, ...], sql.SQL] = {}


def active_query(attachment: AttachedTable) -> sql.SQL:
    """The re-check's statement for this table."""
    key = (
        attachment.id,
        attachment.table,
        tuple(sorted(attachment.columns.items())),
        attachment.sandbox_id_type,
        attachment.generation_type,
    )
    if (query := _ACTIVE.get(key)) is None:
        query = _ACTIVE[key] = sql.SQL(cast(LiteralString, _active_query(attachment).as_string()))  # type: ignore[redundant-cast]
    return query


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
            r["cluster"],
        )
        for r in rows
    }


def host_names(attachment: AttachedTable) -> dict[str, sql.Composable]:
    """The host table's names and key types, for statements that also carry parameters: ``table``,
    ``sid``, ``gen``, ``ns``, ``pod``, ``uid``, ``active`` (its mapped columns) and the key types."""
    cols = attachment.columns
    name = queries.name_in_parameterized
    assert attachment.sandbox_id_type and attachment.generation_type
    # The types come from pg_catalog (format_type quotes what needs quoting), not from user input.
    return {
        "table": name(*attachment.table),
        "sid": name(cols["sandbox_id"]),
        "gen": name(cols["generation"]),
        "ns": name(cols["pod_namespace"]),
        "pod": name(cols["pod_name"]),
        "uid": name(cols["pod_uid"]),
        "active": name(cols["active"]),
        "sid_type": queries.for_parameterized(attachment.sandbox_id_type),
        "gen_type": queries.for_parameterized(attachment.generation_type),
    }


def _active_query(attachment: AttachedTable) -> sql.Composed:
    return sql.SQL(
        "SELECT k.id FROM unnest(%s::bigint[], %s::text[], %s::bigint[]) AS k(id, sandbox_id, generation)"
        " JOIN {table} AS t ON t.{sid} = k.sandbox_id::{sid_type} AND t.{gen} = k.generation::{gen_type}"
        " WHERE t.{active}"
    ).format(**host_names(attachment))


# What a lookup raises when a host table no longer fits its attachment: a key that no longer casts to the
# host's type, a dropped table or column.
LOOKUP_ERRORS = (psycopg.errors.DataError, psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)


class BareLookupFailed(StoreError):
    """A lookup run without a savepoint failed (one of ``LOOKUP_ERRORS``), which aborted the caller's
    transaction: the claim it belonged to rolls back whole, and the caller contains the next ones."""


async def recheck(
    conn: Connection, rows: list[Any], attachments: Mapping[int, AttachedTable], *, contain: bool = True
) -> Recheck:
    """Check claimed rows (each with id, attachment_id, sandbox_id, generation) inside the caller's
    transaction. With ``contain``, a failing lookup is contained in a savepoint and leaves only its own
    rows unknown. Without it, the lookups run bare and a failing one raises ``BareLookupFailed``, its
    transaction aborted: the claimer's choice (store/sweep/pgstore.py), which saves the
    savepoint's two round trips on every claim and contains the lookups only once one has failed."""
    active: set[int] = set()
    unknown: dict[int, str] = {}
    if any(row.attachment_id not in attachments for row in rows):
        attachments = await load_attachments(conn)  # an attachment made after the caller loaded its map
    groups: dict[int, list[Any]] = defaultdict(list)
    for row in rows:
        groups[row.attachment_id].append(row)
    for attachment_id, group in groups.items():
        attachment = attachments.get(attachment_id)
        if attachment is None or not attachment.present:
            for row in group:
                unknown[row.id] = f"attachment {attachment_id}: its table or key columns are gone"
            continue
        keys = ([r.id for r in group], [r.sandbox_id for r in group], [r.generation for r in group])
        if not contain:
            try:
                cur = await conn.execute(active_query(attachment), keys)
            except LOOKUP_ERRORS as exc:
                table = ".".join(attachment.table)
                raise BareLookupFailed(f"the re-check of {table} failed: {first_line(exc)}") from exc
            active.update(r["id"] for r in await cur.fetchall())
            continue
        try:
            async with conn.transaction():
                cur = await conn.execute(active_query(attachment), keys)
                active.update(r["id"] for r in await cur.fetchall())
        except LOOKUP_ERRORS as exc:
            # A key that no longer casts to the host's type, a dropped table or column: uncertain, so
            # those rows wait for a retry (and an operator) rather than being deleted or dropped.
            for row in group:
                unknown[row.id] = f"re-check failed: {first_line(exc)}"
    return Recheck(frozenset(active), unknown, attachments)


class Generation(StrEnum):
    """What the attached tables say of one (sandbox_id, generation) key, for the reconciliation pass."""

    ACTIVE = "active"  # some row is active (or NULL: not known to be retired): never touch its pods
    RETIRED = "retired"  # rows exist and none is active
    NO_ROW = "no_execution_row"  # no attached table has the key
    UNKNOWN = "unknown"  # the key does not fit a table's types, or a table could not be read: leave it


def _generation_query(attachment: AttachedTable) -> sql.Composed:
    return sql.SQL(
        "SELECT k.i, bool_or(t.{active} IS NOT FALSE) AS active"
        " FROM unnest(%s::int[], %s::text[], %s::bigint[]) AS k(i, sandbox_id, generation)"
        " JOIN {table} AS t ON t.{sid} = k.sandbox_id::{sid_type} AND t.{gen} = k.generation::{gen_type}"
        " GROUP BY k.i"
    ).format(**host_names(attachment))


async def generations(
    conn: Connection, keys: list[tuple[str, int]], attachments: Mapping[int, AttachedTable]
) -> list[tuple[Generation, int | None]]:
    """For each (sandbox_id, generation) key, what every attached table says of it, and the
    attachment to name in an outbox row (the one holding the retired row, else the first one).

    Runs in the caller's transaction; a batch that fails to cast (a label value that is not of the
    host's type) is retried key by key in savepoints, so one odd pod leaves only itself unknown."""
    present = [a for a in sorted(attachments.values(), key=lambda a: a.id) if a.present]
    if not present:
        return [(Generation.UNKNOWN, None)] * len(keys)
    states: list[tuple[Generation, int | None]] = [(Generation.NO_ROW, present[0].id)] * len(keys)
    for attachment in present:
        found = await _lookup(conn, attachment, list(range(len(keys))), keys)
        for i, active in found.items():
            if active is None:
                states[i] = (Generation.UNKNOWN, None)
            elif states[i][0] is Generation.UNKNOWN:
                continue
            elif active:
                states[i] = (Generation.ACTIVE, attachment.id)
            elif states[i][0] is Generation.NO_ROW:
                states[i] = (Generation.RETIRED, attachment.id)
    return states


async def _lookup(
    conn: Connection, attachment: AttachedTable, indexes: list[int], keys: list[tuple[str, int]]
) -> dict[int, bool | None]:
    """Index -> active for the keys this table has; None for keys it could not check."""
    query = _generation_query(attachment)
    try:
        async with conn.transaction():
            cur = await conn.execute(query, (indexes, [keys[i][0] for i in indexes], [keys[i][1] for i in indexes]))
            return {r["i"]: r["active"] for r in await cur.fetchall()}
    except (psycopg.errors.DataError, psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
        if len(indexes) == 1:
            return {indexes[0]: None}
    found: dict[int, bool | None] = {}
    for i in indexes:
        found.update(await _lookup(conn, attachment, [i], keys))
    return found
