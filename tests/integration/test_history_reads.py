"""A year of history costs the reads nothing: every statement that ``status``, ``explain``, ``check``, the
bulk commands' previews, the metrics refresher and the DBA queries run reads what it shows (open, dead,
stuck or recent rows, each through its index) and never the done history (migration 0016, docs/dba.md
"What each read costs").

Each statement runs under EXPLAIN (ANALYZE, BUFFERS) on a database seeded as a busy platform's
(bench/history_seed.sql, the seeding the bench's history step times at ten million rows): its plan may
not scan the outbox or the attempts, and the pages it touches stay a small fraction of the outbox's. The
answers are checked too: an index path that found nothing would pass the first two.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from helpers import with_dbname
from pod_sweeper.core.states import Status
from pod_sweeper.store import queries
from pod_sweeper.store.admin import bulk
from pod_sweeper.store.reads.explain import Target

SEED = Path(__file__).resolve().parents[2] / "bench" / "history_seed.sql"
DONE, OPEN, DEAD = 300_000, 1_000, 50
BOUND = 800  # pages any one statement may touch; the outbox alone is over five times that (asserted)


@pytest.fixture(scope="module")
def history(pg_server_url: str, template_url: str) -> Iterator[psycopg.Connection[Any]]:
    """One migrated database holding the seeded history, shared by the module's tests (read only)."""
    name = "pod_sweeper_history_reads"
    template = psycopg.conninfo.conninfo_to_dict(template_url)["dbname"]
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
    try:
        with psycopg.connect(with_dbname(pg_server_url, name), autocommit=True, row_factory=dict_row) as conn:
            for statement in SEED.read_text().split(";\n"):
                if statement.strip():
                    conn.execute(statement, {"done": DONE, "open": OPEN, "dead": DEAD})  # type: ignore[call-overload]
            for table in ("breaker", "reconcile_state"):  # each cluster's rows, as its first replica adds them
                conn.execute(
                    sql.SQL(
                        "INSERT INTO pod_sweeper.{} (cluster) VALUES ('default'), ('east') ON CONFLICT DO NOTHING"
                    ).format(sql.Identifier(table))
                )
            conn.execute("VACUUM ANALYZE")
            pages = conn.execute("SELECT relpages FROM pg_class WHERE oid = 'pod_sweeper.outbox'::regclass").fetchone()
            assert pages is not None and pages["relpages"] > 5 * BOUND, pages  # a scan would show
            yield conn
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def pages_and_plan(conn: psycopg.Connection[Any], statement: sql.Composable, params: Any = None) -> tuple[int, str]:
    """The pages the statement touched (its top node's shared hits and reads) and its plan."""
    query = sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {}").format(statement)
    plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(query, params).fetchall())
    top = re.search(r"Buffers: shared((?: \w+=\d+)+)", plan)
    return (sum(int(n) for n in re.findall(r"=(\d+)", top.group(1))) if top else 0), plan


def bounded(conn: psycopg.Connection[Any], name: str, params: Any = None) -> str:
    """Assert the named statement reads no history; its plan."""
    pages, plan = pages_and_plan(conn, queries.load(name), params)
    assert not re.search(r"Seq Scan on (outbox|attempts)\b", plan), f"{name} scans the history:\n{plan}"
    assert pages <= BOUND, f"{name} touched {pages} pages:\n{plan}"
    return plan


def rows(conn: psycopg.Connection[Any], name: str, params: Any = None) -> list[dict[str, Any]]:
    return conn.execute(queries.load(name), params).fetchall()


STATUS = [
    "status_lag",
    "status_summary",
    "status_failures",
    "status_stuck",
    "status_terminating",
    "status_clusters",
    "status_reconcile",
    "status_rejects",
    "status_breaker",
    "status_outages",
    "status_wakeup",
    "status_controls",
    "status_replicas",
    "status_sweepers",
    "status_large_transactions",
    "cluster_rates",  # also the refresher's
    "cluster_gauges",  # the refresher's
    "xmin_horizon",  # the refresher's
]


@pytest.mark.parametrize("name", STATUS)
def test_status_and_the_refresher_read_no_history(history: psycopg.Connection[Any], name: str) -> None:
    bounded(history, name)


@pytest.mark.parametrize("guard", [None, ["a-standby"]], ids=["guard off", "guard on"])
def test_why_rows_wait_reads_the_open_rows_alone(history: psycopg.Connection[Any], guard: list[str] | None) -> None:
    """sql/row_waits.sql, which status, explain and every replica's refresher read: every open row and
    its one reason, from the claim index."""
    params = {"cluster": None, "ids": None, "unswept_after": 60.0}
    if guard:  # the guard's standbys are a live replica's, from its row (migration 0019)
        history.execute(
            "INSERT INTO pod_sweeper.replicas (replica, host, release, schema_version, cluster, dry_run, guard,"
            " rate_limit, concurrency, ready, heartbeat_seconds, started_at, seen_at)"
            " SELECT 'guarded-' || c, 'h', '0', 20, c, false, %s, 100, 8, true, 10, now(), now()"
            " FROM unnest(ARRAY['default', 'east']) AS c",
            (guard,),
        )
    try:
        bounded(history, "row_waits", params)
        found = rows(history, "row_waits", params)
    finally:
        history.execute("DELETE FROM pod_sweeper.replicas")
    assert len(found) == OPEN  # the pending rows (the dead ones wait for no reason: they are ended)
    reasons = {r["reason"] for r in found}
    if guard:  # the seeded rows carry no guard mark: the claim would take none of them
        assert reasons == {"replication_guard"}
    else:  # due, or unswept once a minute has passed since the seeding
        assert reasons and reasons <= {"due", "unswept"}


def test_the_confirmers_claim_reads_the_rows_awaiting_confirmation_alone(history: psycopg.Connection[Any]) -> None:
    """sql/confirm_claim.sql, which every replica runs each confirmation pass: the deleted rows whose pod
    is not yet seen gone, from the partial index ``outbox_to_confirm``, never the confirmed history. It is
    an UPDATE (the claim moves ``confirm_after`` on), so each run is rolled back: the history stays seeded."""
    params = {"cluster": "default", "batch": 50, "recheck_seconds": 5.0}
    due = "UPDATE pod_sweeper.outbox SET confirm_after = now() - interval '1 second' WHERE confirmed_at IS NULL"
    due += " AND confirm_after IS NOT NULL"  # the seeded stuck pods, due now
    with history.transaction(force_rollback=True):
        history.execute(due)
        plan = bounded(history, "confirm_claim", params)
        assert "outbox_to_confirm" in plan, plan
    with history.transaction(force_rollback=True):
        history.execute(due)
        taken = sorted(r["pod_name"] for r in rows(history, "confirm_claim", params))
    assert taken == ["pod-1", "pod-100001", "pod-200001"]  # the default cluster's stuck pods (1 in 100,000)


def test_the_summary_counts_the_open_and_dead_rows_and_the_last_hour_and_estimates_the_rest(
    history: psycopg.Connection[Any],
) -> None:
    summary = rows(history, "status_summary")
    by = {(r["status"], r["outcome"], r["estimated"]): r["rows"] for r in summary}
    assert by[("pending", None, False)] == OPEN and by[("dead", None, False)] == DEAD
    hour = sum(n for (status, outcome, estimated), n in by.items() if status == "done" and not estimated)
    assert DONE / 168 * 0.9 < hour < DONE / 168 * 1.1  # an hour of seven days' rows
    estimate = by[("done", None, True)]  # the planner's, after the VACUUM ANALYZE: close, not exact
    assert DONE * 0.9 < estimate < DONE * 1.1
    failures = rows(history, "status_failures")
    assert len(failures) == 10 and {r["status"] for r in failures} <= {"pending", "dead"}
    stuck = rows(history, "status_terminating")
    assert len(stuck) == DONE // 100_000 and all(r["stuck_at"] for r in stuck)


def explain_params(target: str) -> dict[str, Any]:
    return Target.parse(target).params()


@pytest.mark.parametrize(
    ("target", "found"),
    [
        ("00000000-0000-4000-8000-" + f"{12345:012x}", "pod-12345"),  # a UID
        ("ns-5/pod-12345", "pod-12345"),  # a done pod by name
        ("pod-12345", "pod-12345"),  # a bare name: in every namespace the done rows have
        ("sb-12345", "pod-12345"),  # a sandbox
        ("ns-7/open-7", "open-7"),  # an open row by name
        ("open-7", "open-7"),
        ("open-3", "open-3"),  # a dead row
        ("ns-5/nothing", None),
    ],
)
def test_explain_finds_a_pod_through_an_index_whatever_the_history(
    history: psycopg.Connection[Any], target: str, found: str | None
) -> None:
    params = explain_params(target)
    bounded(history, "explain_outbox", params)
    names = [r["pod_name"] for r in rows(history, "explain_outbox", params)]
    assert names == ([found] if found else [])
    ids = [r["id"] for r in rows(history, "explain_outbox", params)] or [1]
    bounded(history, "explain_attempts", {"ids": ids})
    bounded(history, "explain_suspects", params)
    keeping = {"cluster": "default", "namespace": "ns-5", "name": "pod-12345", "uid": None, "enqueued_at": None}
    bounded(history, "explain_keeping", keeping)


def test_check_reads_the_open_and_recent_namespaces(history: psycopg.Connection[Any]) -> None:
    bounded(history, "check_namespaces", {"cluster": "east"})
    namespaces = [r["pod_namespace"] for r in rows(history, "check_namespaces", {"cluster": "east"})]
    assert namespaces == sorted(f"ns-{n}" for n in range(0, 20, 2))  # east's rows are the even ones
    bounded(history, "check_stale_triggers")


@pytest.mark.parametrize(
    ("filters", "matched"),
    [
        (bulk.Filters(statuses=(Status.DEAD,)), DEAD),
        (bulk.Filters(statuses=(Status.PENDING,), namespace="ns-3"), OPEN // 20),
        (bulk.Filters(statuses=(Status.DEAD, Status.DONE), ids=(12345, 1)), 2),
        (bulk.Filters(statuses=(Status.DONE,)), 0),  # no --namespace, no ids: refused by the CLI
    ],
)
def test_a_bulk_preview_reads_the_rows_it_may_match(
    history: psycopg.Connection[Any], filters: bulk.Filters, matched: int
) -> None:
    params = {**filters.params(), "after": 0, "page": bulk.PAGE}
    bounded(history, "bulk_match", params)
    assert len(rows(history, "bulk_match", params)) == matched


def test_a_bulk_preview_of_done_rows_pages_through_its_namespace(history: psycopg.Connection[Any]) -> None:
    """The done rows of a namespace are history the operator asked for: read a page at a time, each
    page's statement bounded, never the other namespaces' rows."""
    params = {**bulk.Filters(statuses=(Status.DONE,), namespace="ns-4").params(), "after": 0, "page": bulk.PAGE}
    bounded(history, "bulk_match", params)
    assert len(rows(history, "bulk_match", params)) == bulk.PAGE  # a page of the namespace's 15,000


@pytest.mark.parametrize("name", queries.dba_query_names())
def test_the_dba_queries_read_no_history(history: psycopg.Connection[Any], name: str) -> None:
    bounded(history, f"dba/{name}")
