"""While something pins the xmin horizon, the sweep's hot-path statements read what they take, not
every version the sweep left behind (store/sweep/cursor.py, docs/design.md "A pinned xmin horizon").

The versions are made by the daemon's own statements (claim.sql, record_results.sql) under a snapshot
kept open in another session, as a report or an idle-in-transaction client keeps one; each statement is
then run under EXPLAIN (ANALYZE, BUFFERS) and its buffers counted: from the cursor's floor, a handful;
from the start of the index, every page of the swept rows. The bench's `held snapshot` step measures the
same over half an hour (bench/README.md). The metrics refresher names the holder and reads the gauges
of every open row less often while the horizon stays pinned."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers import DaemonThread, add_execution, daemon_settings, retire, row_for, run, settings_for, wait_until
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.store import db, queries
from pod_sweeper.store.sweep import gauges, rates
from pod_sweeper.store.sweep.cursor import DISCOVERY_SECONDS, MARGIN, START
from pod_sweeper.tasks.loops import refresher
from pod_sweeper.tasks.process import health

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
        "gathering": False,
        "transaction_rows": 500,  # the shipped breaker_transaction_rows: the claim's first look on
    }


@pytest.fixture
def swept_under_a_pinned_horizon(pg: psycopg.Connection[Any], db_url: str) -> Iterator[datetime]:
    """SWEPT rows enqueued ten minutes ago, claimed and recorded done by the daemon's statements while
    another session keeps its snapshot open; then one fresh row. Yields the database's clock."""
    pg.execute("INSERT INTO pod_sweeper.attachments (table_schema, table_name, column_map) VALUES ('p', 't', '{}')")
    with psycopg.connect(db_url) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pod_sweeper.outbox").fetchone()  # the snapshot, kept open from here
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
    pg: psycopg.Connection[Any], swept_under_a_pinned_horizon: datetime
) -> None:
    floor = swept_under_a_pinned_horizon - MARGIN
    for name, params in (
        ("claim", claim_params()),
        ("next_due", {"cluster": "default", "horizon": 5.0, "guard": None, "recheck": 2.0}),
    ):
        from_start, plan = buffers(pg, name, {**params, "floor": START})
        from_floor, plan = buffers(pg, name, {**params, "floor": floor})
        assert "outbox_claimable" in plan, plan
        assert from_floor <= 40, plan  # the fresh row, the pause and hold lookups, the wakeup flag
        assert from_start > 5 * from_floor, (from_start, from_floor)  # what a discovery walks
    taken = pg.execute(queries.load("claim"), {**claim_params(), "floor": floor}).fetchall()
    assert [r["sandbox_id"] for r in taken] == ["fresh"]


def test_the_record_finds_its_rows_by_key_not_through_the_claim_index(
    pg: psycopg.Connection[Any], swept_under_a_pinned_horizon: datetime
) -> None:
    floor = swept_under_a_pinned_horizon - MARGIN
    claimed = pg.execute(queries.load("claim"), {**claim_params(), "floor": floor}).fetchall()
    row = {"id": claimed[0]["id"], "epoch": claimed[0]["claim_epoch"], "status": "done", "outcome": "deleted",
           "result": "deleted", "delay": 0, "error": None, "http_status": 200, "refund": 0, "started": None,
           "duration_ms": None, "reason": None, "confirm_in": None}  # fmt: skip
    record = {"rows": json.dumps([row]), "ids": [row["id"]], "cluster": "default", "replica": "t"}
    pages, plan = buffers(pg, "record_results", record)
    assert "outbox_pkey" in plan and "outbox_claimable" not in plan, plan
    assert pages <= 40, plan


def test_the_surge_watch_and_the_transaction_rule_read_their_window_and_their_transaction(
    pg: psycopg.Connection[Any], swept_under_a_pinned_horizon: datetime
) -> None:
    pg.execute("INSERT INTO pod_sweeper.breaker (cluster) VALUES ('default') ON CONFLICT DO NOTHING")
    arrivals = {"cluster": "default", "window": 2.0, "dry_run": False, "shadow": None, "transaction_rows": 500}
    _, plan = buffers(pg, "breaker_arrivals", arrivals)
    # the open rows from the window's start up; the done ones by their done_at, in the window (here the
    # whole sweep was done within it, so those are all read: the window's rows, as documented)
    assert re.search(r"Index Scan using outbox_claimable .*\n.*Index Cond: .*next_attempt_at >", plan), plan
    assert re.search(r"outbox_done_at .*\n.*Index Cond: \(\(?done_at >", plan), plan
    key = swept_under_a_pinned_horizon - timedelta(minutes=10)  # the swept rows' transaction start
    size, plan = buffers(pg, "breaker_transaction", {"cluster": "default", "keys": [key], "limit": 500})
    assert size <= SWEPT / 10, plan  # its own rows' versions at most, not every open row's


# The surge watch's parameters as a prepared statement takes them, in order, with their types.
ARRIVALS = (("cluster", "text"), ("window", "float8"), ("dry_run", "boolean"), ("shadow", "text[]"),
            ("transaction_rows", "integer"))  # fmt: skip


def prepared_plan(pg: psycopg.Connection[Any], params: dict[str, Any]) -> tuple[int, str]:
    """The surge watch's plan as the daemon's pool runs it, a prepared statement (custom or generic as the
    session's plan_cache_mode says), and the pages it touched; rolled back."""
    text = queries.load("breaker_arrivals").as_string(pg)
    for n, (name, _) in enumerate(ARRIVALS, start=1):
        text = text.replace(f"%({name})s", f"${n}")
    types = sql.SQL(", ").join(sql.SQL(kind) for _, kind in ARRIVALS)  # type names, not values
    # Through a client-side-binding cursor: the server takes no parameters for a utility statement
    # (PREPARE's body would read ours as its own $n, EXPLAIN EXECUTE none at all); psycopg quotes them.
    cursor = psycopg.ClientCursor(pg)
    with pg.transaction(force_rollback=True):  # the statement with it
        cursor.execute(sql.SQL("PREPARE arrivals ({}) AS {}").format(types, queries.shipped_sql_text(text)))
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE arrivals (%s, %s, %s, %s, %s)",
            [params[name] for name, _ in ARRIVALS],
        )
        plan = "\n".join(r["QUERY PLAN"] for r in cursor.fetchall())
        cursor.execute("DEALLOCATE arrivals")
    top = re.search(r"Buffers: shared((?: \w+=\d+)+)", plan)
    assert top is not None, plan
    return sum(int(n) for n in re.findall(r"=(\d+)", top.group(1))), plan


def test_the_surge_watch_keeps_both_bounds_in_its_index_conditions_whatever_the_statistics(
    pg: psycopg.Connection[Any], swept_under_a_pinned_horizon: datetime
) -> None:
    """An hour of history done out of its physical order, beside the versions a pinned horizon keeps:
    statistics under which the statement, when it joined the breaker's row for the window's start, was
    planned with that row inside a nested loop and the claim index read by the cluster alone, every
    version kept (sql/breaker_arrivals.sql before this test: its claim index condition was
    `cluster = 'default'`, and it failed here). As the daemon's pool runs it, a prepared statement,
    custom or generic, the plan carries the window's start (an InitPlan's value, $n) and its now()-based
    form in both index conditions, scans no table, and reads a handful of pages. The window ends after
    the fixture's sweep was recorded, so only the one fresh row is in it."""
    pg.execute("INSERT INTO pod_sweeper.breaker (cluster) VALUES ('default') ON CONFLICT DO NOTHING")
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason, status, outcome, enqueued_at, done_at, next_attempt_at)"
        " SELECT 1, 'h' || g, 1, 'ns', 'h' || g, gen_random_uuid(), 'retired', 'done', 'deleted', t, t, t"
        " FROM (SELECT g, now() - random() * interval '1 hour' AS t FROM generate_series(1, 50000) g) AS x"
    )
    pg.execute("ANALYZE pod_sweeper.outbox")
    # The window: from just after the fixture's last record to now (its rows all done before it began).
    row = pg.execute("SELECT extract(epoch FROM clock_timestamp() - max(done_at)) AS age FROM pod_sweeper.outbox"
                     " WHERE status = 'done' AND sandbox_id LIKE 's%'").fetchone()  # fmt: skip
    assert row is not None
    window = max(0.001, float(row["age"]) - 0.001)
    arrivals = {"cluster": "default", "window": window, "dry_run": False, "shadow": None, "transaction_rows": 500}
    for mode in ("force_custom_plan", "force_generic_plan"):
        pg.execute("SELECT set_config('plan_cache_mode', %s, false)", (mode,))
        pages, plan = prepared_plan(pg, arrivals)
        claim_index = re.search(r"outbox_claimable .*\n.*Index Cond: (.*)", plan)
        done_index = re.search(r"outbox_done_at .*\n.*Index Cond: (.*)", plan)
        assert claim_index is not None and done_index is not None, plan
        assert re.search(r"next_attempt_at > \(now\(\).*next_attempt_at > \$\d", claim_index.group(1)), plan
        assert re.search(r"done_at > \(now\(\).*done_at > \$\d", done_index.group(1)), plan
        assert "Seq Scan on outbox" not in plan, plan
        assert pages <= 40, plan


async def until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """``wait_until`` for a test that runs the daemon's own coroutines on its event loop."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


def test_a_pinned_horizon_is_named_and_the_gauges_of_every_open_row_are_read_less_often(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metrics refresher names the holder (its pid, how long) and, once the horizon has been pinned
    PINNED_AFTER_SECONDS, reads the gauges that walk the whole claim index only every
    PINNED_REFRESH_SECONDS; once the snapshot ends, at every refresh again."""
    monkeypatch.setattr(refresher, "PINNED_AFTER_SECONDS", 0.5)
    monkeypatch.setattr(refresher, "PINNED_REFRESH_SECONDS", 3600.0)
    calls = {"open rows": 0, "holders": 0}
    real_gauges, real_holders = gauges.cluster_gauges, rates.xmin_holders

    async def counted_gauges(conn: Any) -> list[gauges.ClusterGauges]:
        calls["open rows"] += 1
        return await real_gauges(conn)

    async def holders(conn: Any) -> list[rates.XminHolder]:
        calls["holders"] += 1
        return await real_holders(conn)

    monkeypatch.setattr(gauges, "cluster_gauges", counted_gauges)
    monkeypatch.setattr(rates, "xmin_holders", holders)

    async def scenario() -> None:
        pool = db.make_pool(settings_for(db_url), max_size=2)
        await pool.open(wait=True, timeout=10)
        metrics, state = Metrics(), health.Health()
        task = asyncio.create_task(refresher.refresh_gauges(pool, metrics, state, 0.05, "default"))
        horizon = lambda: metrics.registry.get_sample_value("pod_sweeper_xmin_horizon_seconds") or 0.0  # noqa: E731
        try:
            await until(lambda: calls["holders"] >= 3, "three refreshes")
            # not pinned: every refresh reads them (the holders first: one refresh may be between the two)
            assert calls["holders"] - 1 <= calls["open rows"] <= calls["holders"], calls
            async with await psycopg.AsyncConnection.connect(db_url) as holder:
                await holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                await holder.execute("SELECT count(*) FROM pod_sweeper.outbox")  # the snapshot, kept open
                async with pool.connection() as conn:
                    named = await real_holders(conn)
                assert any(h.kind == "transaction" and h.holder == str(holder.info.backend_pid) for h in named)
                await until(lambda: horizon() >= 0.5, "the gauge to show the pinned horizon")
                seen, refreshes = calls["open rows"], calls["holders"]
                await until(lambda: calls["holders"] >= refreshes + 10, "ten more refreshes")
                assert calls["open rows"] <= seen + 1, calls  # (one may have begun before the pin showed)
                await holder.rollback()
            pinned_reads = calls["open rows"]
            await until(lambda: calls["open rows"] > pinned_reads, "the gauges to be read again once it ends")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await pool.close()

    run(scenario())


def test_a_retire_whose_transaction_outlived_the_margin_is_swept_by_the_next_discovery(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """A host transaction stamps its rows with its start; one still open after the claim cursor's floor
    has passed that start commits rows below the floor, which no claim from the floor reads. The next
    discovery (within DISCOVERY_SECONDS, the claimer sleeping no longer) sweeps them."""
    add_execution(execs, kube, "late")
    add_execution(execs, kube, "meanwhile")
    with DaemonThread(daemon_settings(db_url, kube, poll_interval=30.0)) as daemon:
        cursor = daemon.daemon.sweeper.store.cursor
        with psycopg.connect(db_url) as host:
            (started,) = host.execute("SELECT now()").fetchone() or (None,)
            retire(host, "late")  # enqueued with the transaction's start, not committed yet
            retire(execs, "meanwhile")  # the daemon sweeps on, its floor rising past that start
            wait_until(lambda: (cursor.floor or START) > started, timeout=15, what="the floor past the start")
            host.commit()
        row = wait_until(
            lambda: (r := row_for(execs, "late")) and r["status"] == "done" and r,
            timeout=DISCOVERY_SECONDS + 10,
            what="the late row swept",
        )
    assert row["outcome"] == "deleted"
