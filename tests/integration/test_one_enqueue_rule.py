"""One enqueue rule: the trigger and ``backfill`` enqueue the same host rows the same way, and reject
the same hostile rows into ``pod_sweeper.rejects`` with the same problem (store/admin/enqueue_rule.py)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers import attach_table, run, settings_for
from pod_sweeper.store import db
from pod_sweeper.store.admin import backfill

pytestmark = pytest.mark.versions

_U = [str(uuid.UUID(int=i + 1)) for i in range(16)]
# (sandbox_id, generation, pod_namespace, pod_name, pod_uid as text, cluster): one good row per cluster,
# and every kind of value the enqueue cannot hold.
HOSTILE: list[tuple[str | None, int | None, str | None, str | None, str | None, str | None]] = [
    ("ok-east", 1, "ns", "p1", _U[0], "east"),
    ("ok-west", 1, "ns", "p2", _U[1].upper(), "west"),  # upper case: still a UID
    ("braced", 1, "ns", "p3", "{" + _U[2] + "}", "east"),
    ("half-braced", 1, "ns", "p4", "{" + _U[3], "east"),
    ("not-a-uid", 1, "ns", "p5", "pod-uid-5", "east"),
    ("empty-uid", 1, "ns", "p6", "", "east"),
    ("null-ns", 1, None, "p7", _U[6], "east"),
    ("empty-ns", 1, "", "p8", _U[7], "east"),
    ("empty-name", 1, "ns", "", _U[8], "east"),
    (None, 1, "ns", "p10", _U[9], "east"),
    ("null-gen", None, "ns", "p11", _U[10], "east"),
    ("empty-cluster", 1, "ns", "p12", _U[11], ""),
    ("null-cluster", 1, "ns", "p13", _U[12], None),
    ("long-cluster", 1, "ns", "p14", _U[13], "c" * 60),
]

_TABLE = sql.SQL(
    "CREATE TABLE {} (sandbox_id text, generation bigint, pod_namespace text, pod_name text, pod_uid text,"
    " cluster text, active boolean NOT NULL DEFAULT true)"
)
_COLUMNS = ["cluster=cluster"]


def _insert(pg: psycopg.Connection[Any], table: str, *, active: bool) -> None:
    insert = sql.SQL(
        "INSERT INTO {} (sandbox_id, generation, pod_namespace, pod_name, pod_uid, cluster, active)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)"
    ).format(sql.Identifier("public", table))
    for row in HOSTILE:
        pg.execute(insert, (*row, active))


def _outcome(pg: psycopg.Connection[Any]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """What the path left: outbox rows and rejects, as comparable tuples (ids and times left out)."""
    enqueued = pg.execute(
        "SELECT sandbox_id, generation, pod_namespace, pod_name, pod_uid::text, cluster, status FROM pod_sweeper.outbox"
        " ORDER BY pod_name"
    ).fetchall()
    rejected = pg.execute(
        "SELECT sandbox_id, generation, pod_namespace, pod_name, pod_uid, cluster, problem FROM pod_sweeper.rejects"
        " ORDER BY pod_name, sandbox_id"
    ).fetchall()
    return [tuple(r.values()) for r in enqueued], [tuple(r.values()) for r in rejected]


async def _backfill(url: str, *, dry_run: bool = False) -> list[backfill.BackfillResult]:
    async with db.connection(settings_for(url)) as conn, conn.transaction():
        return await backfill.backfill(conn, dry_run=dry_run)


def test_the_trigger_and_backfill_enqueue_and_reject_the_same_hostile_rows_alike(
    pg: psycopg.Connection[Any], db_url: str
) -> None:
    # The trigger: rows inserted active, then retired.
    pg.execute(_TABLE.format(sql.Identifier("public", "by_trigger")))
    run(attach_table(db_url, "public.by_trigger", _COLUMNS))
    _insert(pg, "by_trigger", active=True)
    pg.execute("UPDATE public.by_trigger SET active = false")
    by_trigger = _outcome(pg)
    pg.execute("DELETE FROM pod_sweeper.outbox")
    pg.execute("DELETE FROM pod_sweeper.rejects")
    pg.execute("DROP TABLE public.by_trigger")

    # Backfill: the same rows, retired before the table was attached.
    pg.execute(_TABLE.format(sql.Identifier("public", "by_backfill")))
    _insert(pg, "by_backfill", active=False)
    run(attach_table(db_url, "public.by_backfill", _COLUMNS))
    [dry] = run(_backfill(db_url, dry_run=True))
    assert _outcome(pg) == ([], [])  # a dry run writes nothing
    [done] = run(_backfill(db_url))
    assert (dry.enqueued, dry.rejected) == (done.enqueued, done.rejected)  # the dry run counted what it does
    by_backfill = _outcome(pg)

    assert by_backfill == by_trigger
    enqueued, rejected = by_trigger
    assert {r[0] for r in enqueued} == {"ok-east", "ok-west", "braced"}
    assert len(rejected) == len(HOSTILE) - 3 == done.rejected.total()
    assert done.enqueued == 3 and done.rejected["pod_uid is not a UID"] == 2
    assert {r[6] for r in rejected} >= {"pod_uid is empty", "cluster is empty", "cluster is NULL"}

    [again] = run(_backfill(db_url))  # idempotent: nothing enqueued or rejected twice
    assert (again.enqueued, again.rejected.total()) == (0, 0) and _outcome(pg) == by_backfill
