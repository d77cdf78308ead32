"""Small helpers the test tiers share: the reference executions table and outbox reads."""

from __future__ import annotations

from typing import Any

import psycopg

from pod_sweeper import attach, db
from pod_sweeper.settings import Settings

EXECUTIONS_DDL = """
CREATE TABLE {table} (
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


def create_executions(conn: psycopg.Connection[Any], table: str = "public.executions") -> None:
    conn.execute(EXECUTIONS_DDL.format(table=table))  # type: ignore[arg-type]


async def attach_table(url: str, table: str = "public.executions", columns: list[str] | None = None) -> int:
    async with db.connection(Settings(database_url=url, http_port=0)) as conn:
        return await attach.attach(conn, attach.parse_table(table), attach.parse_mapping(columns or []))


def outbox(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    return list(cur.execute("SELECT * FROM pod_sweeper.outbox ORDER BY id").fetchall())


def wait_until(predicate: Any, *, timeout: float = 10.0, interval: float = 0.01, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        threading_event_wait(interval)


def threading_event_wait(seconds: float) -> None:
    """A poll interval that is a wait on an event, not a bare sleep in the test body."""
    import threading

    threading.Event().wait(seconds)
