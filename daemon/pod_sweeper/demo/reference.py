"""The reference executions table of docs/design.md, for the demo, the tests and the benchmarks."""

from __future__ import annotations

from psycopg import sql

_DDL = """
CREATE TABLE {} (
  sandbox_id         text    NOT NULL,
  generation         bigint  NOT NULL,
  activation_attempt integer NOT NULL DEFAULT 1,
  pod_namespace      text    NOT NULL,
  pod_name           text    NOT NULL,
  pod_uid            uuid,
  active             boolean NOT NULL DEFAULT true,
  state              text    NOT NULL DEFAULT 'starting',
  PRIMARY KEY (sandbox_id, generation)
)
"""


def executions_ddl(schema: str = "public", table: str = "executions") -> sql.Composed:
    """``CREATE TABLE schema.table`` in the reference shape."""
    return sql.SQL(_DDL).format(sql.Identifier(schema, table))
