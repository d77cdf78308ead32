"""``attach`` and ``detach``: install or remove the enqueue trigger on a host table.

The trigger function is generated per attachment with the host's column names baked in (no dynamic
SQL per row; the call and the conditions are ``store.admin.enqueue_rule``'s, which backfill uses too), and
three triggers call it: INSERT, UPDATE and DELETE, each with a WHEN clause so that
the many updates that retire nothing never even enter PL/pgSQL. Every name goes through
``psycopg.sql.Identifier``; the generated function body reaches the server as a string literal, so a
hostile column name cannot end the body early. Everything happens in one transaction with a short
``lock_timeout``: a table that does not fit, or a lock that cannot be had, changes nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from psycopg import sql

from pod_sweeper.core.errors import AttachError, ConfigError
from pod_sweeper.core.settings import DEFAULT_CLUSTER
from pod_sweeper.store import queries
from pod_sweeper.store.admin import enqueue_rule
from pod_sweeper.store.db import Connection

ROLES = ("sandbox_id", "generation", "pod_namespace", "pod_name", "pod_uid", "active")
# Mapped only when named: the column holding each row's Kubernetes cluster (else `attach --cluster`, or
# the default cluster, names one cluster for the whole table).
OPTIONAL_ROLES = ("cluster",)
TRIGGER_PREFIX = "pod_sweeper_enqueue"
LOCK_TIMEOUT = "5s"

# Types each role accepts (pg_type.typname), and how its value reaches pod_sweeper.enqueue.
_TEXTUAL = {"text", "varchar", "bpchar", "name"}
_ACCEPTED: dict[str, set[str]] = {
    "sandbox_id": _TEXTUAL | {"uuid", "int2", "int4", "int8"},
    "generation": {"int2", "int4", "int8"},
    "pod_namespace": _TEXTUAL,
    "pod_name": _TEXTUAL,
    "pod_uid": {"uuid"} | _TEXTUAL,
    "active": {"bool"},
    "cluster": _TEXTUAL,
}


@dataclass(frozen=True)
class HostTable:
    """A host table, by schema and name (as ``parse_table`` read them)."""

    schema: str
    table: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.table}"

    def identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)


_IDENT = re.compile(r'"((?:[^"]|"")+)"|([A-Za-z_][A-Za-z0-9_$]*)')


def parse_table(text: str) -> HostTable:
    """``SCHEMA.TABLE`` as Postgres reads it: unquoted parts fold to lower case, ``"quoted"`` ones
    keep case and may hold any character."""
    parts: list[str] = []
    pos = 0
    while True:
        match = _IDENT.match(text, pos)
        if not match:
            break
        parts.append(match[1].replace('""', '"') if match[1] is not None else match[2].lower())
        pos = match.end()
        if pos < len(text) and text[pos] == ".":
            pos += 1
            continue
        break
    if pos != len(text) or len(parts) != 2:
        raise ConfigError(f'--table {text!r}: expected SCHEMA.TABLE (quote a part with "..." if needed)')
    return HostTable(parts[0], parts[1])


def parse_mapping(pairs: list[str]) -> dict[str, str]:
    """``ROLE=COLUMN`` flags over the reference names; unknown roles are a usage error. The optional
    ``cluster`` role is in the mapping only when named."""
    mapping = {role: role for role in ROLES}
    for pair in pairs:
        role, sep, column = pair.partition("=")
        role = role.strip()
        if not sep or not column:
            raise ConfigError(f"--column {pair!r}: expected ROLE=COLUMN")
        if role not in ROLES + OPTIONAL_ROLES:
            known = ", ".join(ROLES + OPTIONAL_ROLES)
            raise ConfigError(f"--column {pair!r}: unknown role {role!r}; roles are {known}")
        mapping[role] = column
    return mapping


async def column_types(conn: Connection, target: HostTable) -> dict[str, str]:
    cur = await conn.execute(
        """
        SELECT c.relkind, a.attname, t.typname
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        LEFT JOIN pg_type t ON t.oid = a.atttypid
        WHERE n.nspname = %s AND c.relname = %s
        """,
        (target.schema, target.table),
    )
    rows = await cur.fetchall()
    if not rows:
        raise AttachError(f"table {target} does not exist")
    if rows[0]["relkind"] not in ("r", "p"):
        raise AttachError(f"{target} is not a table")
    return {row["attname"]: row["typname"] for row in rows if row["attname"] is not None}


def check_fit(target: HostTable, mapping: dict[str, str], types: dict[str, str]) -> None:
    """Raise AttachError naming the first mapped column that is missing or of the wrong type."""
    for role in (r for r in ROLES + OPTIONAL_ROLES if r in mapping):
        column = mapping[role]
        if column not in types:
            raise AttachError(f"table {target} has no column {column!r} (role {role})")
        if types[column] not in _ACCEPTED[role]:
            accepted = ", ".join(sorted(_ACCEPTED[role]))
            raise AttachError(
                f"column {column!r} of {target} (role {role}) is of type {types[column]}; expected one of {accepted}"
            )


def _function_name(attachment_id: int) -> sql.Identifier:
    return sql.Identifier("pod_sweeper", f"enqueue_{attachment_id}")


def _trigger_names() -> dict[str, sql.Identifier]:
    return {op: sql.Identifier(f"{TRIGGER_PREFIX}_{op}") for op in ("ins", "upd", "del")}


async def attach(conn: Connection, target: HostTable, mapping: dict[str, str], *, cluster: str | None = None) -> int:
    """Install (or replace) the trigger on ``target``; returns the attachment id. Each row's cluster is
    its ``cluster`` column when the mapping names one, else ``cluster`` (default: the default cluster)."""
    if cluster is not None and "cluster" in mapping:
        raise ConfigError(
            "--cluster names one cluster for the whole table; --column cluster=... reads it per row: not both"
        )
    async with conn.transaction():
        await conn.execute(queries.load("lock_timeout"), {"timeout": LOCK_TIMEOUT})
        types = await column_types(conn, target)
        check_fit(target, mapping, types)
        row = await (
            await conn.execute(
                """
                INSERT INTO pod_sweeper.attachments (table_schema, table_name, column_map, cluster)
                VALUES (%s, %s, %s::jsonb, %s)
                ON CONFLICT (table_schema, table_name) DO UPDATE
                    SET column_map = EXCLUDED.column_map, cluster = EXCLUDED.cluster, attached_at = now(),
                        detached_at = NULL
                RETURNING id
                """,
                (target.schema, target.table, json.dumps(mapping), cluster or DEFAULT_CLUSTER),
            )
        ).fetchone()
        assert row is not None
        attachment_id: int = row["id"]

        rule = enqueue_rule.Rule(attachment_id, mapping, types, cluster or DEFAULT_CLUSTER)
        body = sql.SQL(
            "BEGIN\n  IF TG_OP = 'DELETE' THEN\n    PERFORM {};\n    RETURN OLD;\n  END IF;\n  PERFORM {};\n"
            "  RETURN NEW;\nEND;"
        ).format(rule.call("OLD", "row_deleted"), rule.call("NEW", "retired"))
        await conn.execute(
            # SECURITY DEFINER: the host's writers need no right on our schema (see migration 0003).
            sql.SQL(
                "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql"
                " SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS {}"
            ).format(_function_name(attachment_id), sql.Literal(body.as_string(conn)))
        )
        when = rule.when()
        events = {"ins": "INSERT", "upd": "UPDATE", "del": "DELETE"}
        for op, trigger in _trigger_names().items():
            await conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(trigger, target.identifier()))
            await conn.execute(
                sql.SQL("CREATE TRIGGER {} AFTER {} ON {} FOR EACH ROW WHEN ({}) EXECUTE FUNCTION {}()").format(
                    trigger, sql.SQL(events[op]), target.identifier(), when[op], _function_name(attachment_id)
                )
            )
    return attachment_id


async def nullable_columns(conn: Connection, target: HostTable, mapping: dict[str, str]) -> list[str]:
    """The mapped columns (other than ``active``) that allow NULL. A retire with a NULL there is
    recorded in ``pod_sweeper.rejects`` instead of enqueued, so ``attach`` warns about them."""
    cur = await conn.execute(
        """
        SELECT a.attname FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped AND NOT a.attnotnull
        """,
        (target.schema, target.table),
    )
    nullable = {row["attname"] for row in await cur.fetchall()}
    return [
        f"{mapping[role]} ({role})"
        for role in ROLES + OPTIONAL_ROLES
        if role in mapping and role not in ("active", "pod_uid") and mapping[role] in nullable
    ]


async def stale_triggers(conn: Connection) -> list[HostTable]:
    """Attached tables whose trigger predates migration 0008 (a malformed text UID is skipped there,
    not recorded as a reject): ``attach`` again regenerates it."""
    rows = await (await conn.execute(queries.load("check_stale_triggers"))).fetchall()
    return [HostTable(row["table_schema"], row["table_name"]) for row in rows]


async def detach(conn: Connection, target: HostTable) -> bool:
    """Remove the trigger; False when the table was not attached. Outbox rows stay as they are."""
    async with conn.transaction():
        await conn.execute(queries.load("lock_timeout"), {"timeout": LOCK_TIMEOUT})
        row = await (
            await conn.execute(
                "UPDATE pod_sweeper.attachments SET detached_at = now()"
                " WHERE table_schema = %s AND table_name = %s AND detached_at IS NULL RETURNING id",
                (target.schema, target.table),
            )
        ).fetchone()
        if row is None:
            return False
        exists = await (
            await conn.execute(queries.load("relation_exists"), {"name": target.identifier().as_string(conn)})
        ).fetchone()
        if exists and exists["present"]:
            for trigger in _trigger_names().values():
                await conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(trigger, target.identifier()))
        await conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(_function_name(row["id"])))
    return True


async def feeding(conn: Connection, *, cluster: str) -> list[str]:
    """The attached tables that can enqueue rows of ``cluster`` (none: nothing will ever be swept)."""
    rows = await (await conn.execute(queries.load("attached_for_cluster"), {"cluster": cluster})).fetchall()
    return [r["name"] for r in rows]
