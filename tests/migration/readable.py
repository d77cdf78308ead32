"""docs/schema.sql: the schema the migration chain builds, written out for a person to read (tables
with their columns, constraints, indexes and triggers; views; functions with their bodies), the way
procrastinate keeps its schema.sql. Generated from a database migrated from scratch; the migration tier
holds the file to it (``POD_SWEEPER_UPDATE_REFERENCE=1`` rewrites it)."""

from __future__ import annotations

from typing import Any

import psycopg

SCHEMA = "pod_sweeper"

_TABLES = """
SELECT c.oid, c.relname, obj_description(c.oid, 'pg_class') AS comment FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname
"""
_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull, a.attidentity, a.attgenerated,
       pg_get_expr(d.adbin, d.adrelid) AS expr
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
"""
_CONSTRAINTS = """
SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
WHERE conrelid = %s AND contype <> 'n' ORDER BY contype, conname
"""
_INDEXES = """
SELECT pg_get_indexdef(i.indexrelid) AS def FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = %s AND NOT EXISTS (SELECT FROM pg_constraint k WHERE k.conindid = i.indexrelid)
ORDER BY c.relname
"""
_TRIGGERS = (
    "SELECT pg_get_triggerdef(oid, true) AS def FROM pg_trigger WHERE tgrelid = %s AND NOT tgisinternal ORDER BY tgname"
)
_VIEWS = """
SELECT c.relname, pg_get_viewdef(c.oid, true) AS def FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind = 'v' ORDER BY c.relname
"""
_FUNCTIONS = """
SELECT pg_get_functiondef(p.oid) AS def FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = %s ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
"""


def _column(row: dict[str, Any]) -> str:
    text = f"{row['attname']} {row['type']}"
    if row["attidentity"]:
        text += " GENERATED " + ("ALWAYS" if row["attidentity"] == "a" else "BY DEFAULT") + " AS IDENTITY"
    elif row["attgenerated"] == "s":
        text += f" GENERATED ALWAYS AS ({row['expr']}) STORED"
    elif row["expr"] is not None:
        text += f" DEFAULT {row['expr']}"
    return text + (" NOT NULL" if row["attnotnull"] else "")


def readable_schema(url: str) -> str:
    """The schema of the database at ``url`` as SQL a person reads (not meant to be run)."""
    with psycopg.connect(url, row_factory=psycopg.rows.dict_row) as conn:
        major = conn.info.server_version // 10000
        out = [
            f"-- The {SCHEMA} schema as the migrations build it (migrations/), generated from PostgreSQL {major}",
            "-- by tests/migration/readable.py; do not edit. It is for reading: migrate with `pod-sweeper migrate`.",
            "",
            "-- Tables",
            "",
        ]
        for table in conn.execute(_TABLES, (SCHEMA,)).fetchall():
            lines = [_column(c) for c in conn.execute(_COLUMNS, (table["oid"],)).fetchall()]
            lines += [f"CONSTRAINT {k['conname']} {k['def']}" for k in conn.execute(_CONSTRAINTS, (table["oid"],))]
            out.append(f"CREATE TABLE {SCHEMA}.{table['relname']} (\n    " + ",\n    ".join(lines) + "\n);")
            if table["comment"]:
                comment = table["comment"].replace("'", "''")
                out.append(f"COMMENT ON TABLE {SCHEMA}.{table['relname']} IS '{comment}';")
            out += [f"{i['def']};" for i in conn.execute(_INDEXES, (table["oid"],)).fetchall()]
            out += [f"{t['def']};" for t in conn.execute(_TRIGGERS, (table["oid"],)).fetchall()]
            out.append("")
        out += ["-- Views", ""]
        for view in conn.execute(_VIEWS, (SCHEMA,)).fetchall():
            out += [f"CREATE VIEW {SCHEMA}.{view['relname']} AS\n{view['def'].rstrip()}", ""]
        out += ["-- Functions (the enqueue trigger's among them)", ""]
        for function in conn.execute(_FUNCTIONS, (SCHEMA,)).fetchall():
            out += [function["def"].rstrip() + ";", ""]
    return "\n".join(out).rstrip() + "\n"


def major_of(text: str) -> int | None:
    """The PostgreSQL major a generated file says it came from."""
    first = text.split("\n", 1)[0]
    return int(first.rsplit(" ", 1)[1]) if first.rsplit(" ", 1)[-1].isdigit() else None
