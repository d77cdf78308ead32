"""docs/schema.sql: the schema the migration chain builds, written out for a person to read (tables
with their columns, constraints and indexes; functions with their bodies; views; triggers), the way
procrastinate keeps its schema.sql, and in an order that runs: foreign keys after every table, the
views in the order they read each other, the triggers after their functions. It is the one schema
snapshot: the migration tier holds the chain to it on every PostgreSQL major it tests (the file run on
an empty database builds what the chain builds), and word for word on the major it was generated from
(``POD_SWEEPER_UPDATE_REFERENCE=1`` rewrites it)."""

from __future__ import annotations

from typing import Any

import psycopg

SCHEMA = "pod_sweeper"

_TABLES = """
SELECT c.oid, c.relname, obj_description(c.oid, 'pg_class') AS comment,
       array_to_string(c.reloptions, ', ') AS options FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname
"""
_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull, a.attidentity, a.attgenerated,
       pg_get_expr(d.adbin, d.adrelid) AS expr
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
"""
_CONSTRAINTS = """
SELECT conname, pg_get_constraintdef(oid) AS def, contype = 'f' AS foreign FROM pg_constraint
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
SELECT c.oid, c.relname, pg_get_viewdef(c.oid, true) AS def,
       ARRAY(SELECT DISTINCT d.refobjid FROM pg_rewrite r JOIN pg_depend d
             ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid AND d.refobjid <> c.oid
             WHERE r.ev_class = c.oid) AS reads
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
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
            "-- by tests/migration/readable.py; do not edit. It is for reading, and run on an empty database it",
            "-- builds the same schema (the migration tier checks both): install with `pod-sweeper migrate`,",
            "-- which also keeps the ledger.",
            "",
            "SET check_function_bodies = false;",
            f"CREATE SCHEMA {SCHEMA};",
            "",
            "-- Tables",
            "",
        ]
        foreign: list[str] = []
        triggers: list[str] = []
        for table in conn.execute(_TABLES, (SCHEMA,)).fetchall():
            lines = [_column(c) for c in conn.execute(_COLUMNS, (table["oid"],)).fetchall()]
            for k in conn.execute(_CONSTRAINTS, (table["oid"],)).fetchall():
                if k["foreign"]:
                    foreign.append(f"ALTER TABLE {SCHEMA}.{table['relname']} ADD CONSTRAINT {k['conname']} {k['def']};")
                else:
                    lines.append(f"CONSTRAINT {k['conname']} {k['def']}")
            options = f" WITH ({table['options']})" if table["options"] else ""
            out.append(f"CREATE TABLE {SCHEMA}.{table['relname']} (\n    " + ",\n    ".join(lines) + f"\n){options};")
            if table["comment"]:
                comment = table["comment"].replace("'", "''")
                out.append(f"COMMENT ON TABLE {SCHEMA}.{table['relname']} IS '{comment}';")
            out += [f"{i['def']};" for i in conn.execute(_INDEXES, (table["oid"],)).fetchall()]
            triggers += [f"{t['def']};" for t in conn.execute(_TRIGGERS, (table["oid"],)).fetchall()]
            out.append("")
        out += ["-- Foreign keys", "", *foreign, ""]
        out += ["-- Functions (the enqueue trigger's among them)", ""]
        for function in conn.execute(_FUNCTIONS, (SCHEMA,)).fetchall():
            out += [function["def"].rstrip() + ";", ""]
        out += ["-- Views (each after the views it reads)", ""]
        for view in _in_dependency_order(conn.execute(_VIEWS, (SCHEMA,)).fetchall()):
            out += [f"CREATE VIEW {SCHEMA}.{view['relname']} AS\n{view['def'].rstrip()}", ""]
        out += ["-- Triggers", "", *triggers]
    return "\n".join(out).rstrip() + "\n"


def _in_dependency_order(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The views, each after the views it reads (by name where neither reads the other)."""
    pending = {view["oid"]: view for view in views}
    ordered: list[dict[str, Any]] = []
    while pending:
        ready = [v for v in pending.values() if not set(v["reads"]) & set(pending)]
        if not ready:
            raise ValueError("the views read each other in a cycle")
        first = min(ready, key=lambda v: str(v["relname"]))
        ordered.append(first)
        del pending[first["oid"]]
    return ordered


def major_of(text: str) -> int | None:
    """The PostgreSQL major a generated file says it came from."""
    first = text.split("\n", 1)[0]
    return int(first.rsplit(" ", 1)[1]) if first.rsplit(" ", 1)[-1].isdigit() else None
