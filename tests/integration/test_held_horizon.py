"""While something holds the xmin horizon, the sweep's hot-path statements read what they take, not
every version the sweep left behind (store/cursor.py, docs/design.md "A held xmin horizon").

The versions are made by the daemon's own statements (claim.sql, record_results.sql) under a snapshot
held open in another session, as a report or an idle-in-transaction client holds one; each statement is
then run under EXPLAIN (ANALYZE, BUFFERS) and its buffers counted: from the cursor's floor, a handful;
from the start of the index, every page of the swept rows. The bench's held-snapshot step measures the
same over half an hour (bench/README.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pod_sweeper.store import queries
from pod_sweeper.store.cursor import MARGIN, START

SWEPT = 3_000


def buffers(pg: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> tuple[int, str]:
    """The pages a statement touched (its top node's shared hits and reads), and its plan; rolled back."""
    with pg.transaction(force_rollback=True):
        rows = pg.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {}").format(queries.load(name)), params)
        plan = "\n".join(r["QUERY PLAN"] for r in rows.fetchall())
    top = re.search(r"Buffers: shared((?: \w+=\d+)+)", plan)
    assert top is not None, plan
    return sum(int(n) for n in re.findall(r"=(\d+)", top.group(1))), plan


def claim_params() -> dict[str, Any]:
    return {
        "batch": 100,
        "owner": "t",
        "lease_seconds": 60,
        "disarm": True,
        "cluster": "default",
        "guard": None,
        "disarm_after": 0.0,
    }


@pytest.fixture
def swept_under_a_held_horizon(pg: psycopg.Connection[Any], db_url: str) -> Iterator[datetime]:
    """SWEPT rows enqueued ten minutes ago, claimed and recorded done by the daemon's statements while
    another session holds its snapshot; then one fresh row. Yields the database's clock."""
    pg.execute("INSERT INTO pod_sweeper.attachments (table_schema, table_name, column_map) VALUES ('p', 't', '{}')")
    with psycopg.connect(db_url) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pod_sweeper.outbox").fetchone()  # the snapshot, held from here
        pg.execute(
            "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
            " reason, next_attempt_at, enqueued_at)"
            " SELECT 1, 's' || g, 1, 'ns', 'p' || g, gen_random_uuid(), 'retired',"
            " now() - interval '10 min', now() - interval '10 min' FROM generate_series(1, %s) g",
            (SWEPT,),
        )
        # The sweep, as it stands ten minutes on: each batch claimed (a lease that ended long ago) and
        # recorded done.
        past = {**claim_params(), "floor": START, "lease_seconds": -600}
        while claimed := pg.execute(queries.load("claim"), past).fetchall():
            done = [
                {"id": r["id"], "epoch": r["claim_epoch"], "status": "done", "outcome": "deleted", "result": "deleted",
                 "delay": 0, "error": None, "http_status": 200, "refund": 0, "started": None, "duration_ms": None,
                 "reason": None, "confirm_in": None}
                for r in claimed
            ]  # fmt: skip
            record = {"rows": json.dumps(done), "ids": [r["id"] for r in done], "cluster": "default", "replica": "t"}
            pg.execute(queries.load("record_results"), record)
        pg.execute(
            "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
            " reason) VALUES (1, 'fresh', 1, 'ns', 'fresh', gen_random_uuid(), 'retired')"
        )
        pg.execute("VACUUM ANALYZE pod_sweeper.outbox")  # removes nothing: the snapshot needs every version
        now = pg.execute("SELECT now() AS now").fetchone()["now"]
        yield now


def test_claim_and_next_due_from_the_floor_read_a_handful_of_pages_whatever_was_swept(
    pg: psycopg.Connection[Any], swept_under_a_held_horizon: datetime
) -> None:
    floor = swept_under_a_held_horizon - MARGIN
    for name, params in (
        ("claim", claim_params()),
        ("next_due", {"cluster": "default", "horizon": 5.0}),
    ):
        from_start, plan = buffers(pg, name, {**params, "floor": START})
        from_floor, plan = buffers(pg, name, {**params, "floor": floor})
        assert "outbox_claimable" in plan, plan
        assert from_floor <= 40, plan  # the fresh row, the pause and hold lookups, the wakeup flag
        assert from_start > 5 * from_floor, (from_start, from_floor)  # what a discovery walks
    taken = pg.execute(queries.load("claim"), {**claim_params(), "floor": floor}).fetchall()
    assert [r["sandbox_id"] for r in taken] == ["fresh"]


def test_the_record_finds_its_rows_by_key_not_through_the_claim_index(
    pg: psycopg.Connection[Any], swept_under_a_held_horizon: datetime
) -> None:
    floor = swept_under_a_held_horizon - MARGIN
    claimed = pg.execute(queries.load("claim"), {**claim_params(), "floor": floor}).fetchall()
    row = {"id": claimed[0]["id"], "epoch": claimed[0]["claim_epoch"], "status": "done", "outcome": "deleted",
           "result": "deleted", "delay": 0, "error": None, "http_status": 200, "refund": 0, "started": None,
           "duration_ms": None, "reason": None, "confirm_in": None}  # fmt: skip
    record = {"rows": json.dumps([row]), "ids": [row["id"]], "cluster": "default", "replica": "t"}
    pages, plan = buffers(pg, "record_results", record)
    assert "outbox_pkey" in plan and "outbox_claimable" not in plan, plan
    assert pages <= 40, plan


def test_the_surge_watch_and_the_transaction_rule_read_their_window_and_their_transaction(
    pg: psycopg.Connection[Any], swept_under_a_held_horizon: datetime
) -> None:
    pg.execute("INSERT INTO pod_sweeper.breaker (cluster) VALUES ('default') ON CONFLICT DO NOTHING")
    _, plan = buffers(pg, "breaker_arrivals", {"cluster": "default", "window": 2.0})
    # the open rows from the window's start up; the done ones by their done_at, in the window (here the
    # whole sweep was done within it, so those are all read: the window's rows, as documented)
    assert re.search(r"Index Scan using outbox_claimable .*\n.*Index Cond: .*next_attempt_at >", plan), plan
    assert re.search(r"outbox_done_at .*\n.*Index Cond: \(done_at >", plan), plan
    key = swept_under_a_held_horizon - timedelta(minutes=10)  # the swept rows' transaction start
    size, plan = buffers(pg, "breaker_transaction", {"cluster": "default", "keys": [key], "limit": 500})
    assert size <= SWEPT / 10, plan  # its own rows' versions at most, not every open row's
