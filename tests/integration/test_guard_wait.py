"""A row the replication guard holds is not due: the claimer's next-due read and its claim agree, and a
replica whose every row is held looks again at a modest interval instead of claiming in a loop on the
host's primary (it claimed 230-260 times a second before). The guard's whole promise, with a real
standby and a failover, is tests/failover/test_failover.py's."""

from __future__ import annotations

from typing import Any

import psycopg

from helpers import (
    DaemonThread,
    add_execution,
    daemon_settings,
    retire,
    run,
    settings_for,
    threading_event_wait,
    wait_until,
)
from pod_sweeper.store import db
from pod_sweeper.store.sweep import outbox
from pod_sweeper.store.sweep.cursor import START

MISSING = ["no-such-standby"]  # a named standby that is not connected holds every row


def _insert(pg: psycopg.Connection[Any], n: int) -> None:
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason) SELECT 1, 's' || g, 1, 'ns', 'p' || g, gen_random_uuid(), 'retired' FROM generate_series(1, %s) g",
        (n,),
    )


def test_a_held_row_is_due_again_in_the_recheck_interval_and_an_unmarked_one_now(
    pg: psycopg.Connection[Any], db_url: str
) -> None:
    _insert(pg, 3)

    async def due(guard: list[str] | None) -> outbox.Due:
        async with db.connection(settings_for(db_url)) as conn:
            return await outbox.next_due(conn, cluster="default", guard=guard, recheck=1.5)

    unmarked = run(due(MISSING))  # no mark yet: due now (the claim marks it first)
    assert unmarked.seconds is not None and unmarked.seconds <= 0 and not unmarked.guard_keeps_back

    async def mark() -> int:
        async with db.connection(settings_for(db_url)) as conn:
            return await outbox.guard_mark(conn, cluster="default")

    assert run(mark()) == 3
    held = run(due(MISSING))
    assert held.guard_keeps_back and held.seconds is not None and 1.0 < held.seconds <= 1.5, held
    off = run(due(None))  # the guard off: the same rows are due now
    assert off.seconds is not None and off.seconds <= 0 and not off.guard_keeps_back

    # and the claim agrees: it takes none of them while the guard holds them
    async def claim() -> list[Any]:
        async with db.connection(settings_for(db_url)) as conn:
            batch = await outbox.claim(
                conn, cluster="default", owner="t", batch=10, lease_seconds=30, attachments={}, disarm=False,
                at_claim=lambda *_: None, guard=MISSING, floor=START,
            )  # fmt: skip
            return [c.id for c in batch.to_send] + [c.id for c, _ in batch.decided]

    assert run(claim()) == []


def commits(pg: psycopg.Connection[Any]) -> int:
    row = pg.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
    pg.execute("SELECT pg_stat_clear_snapshot()")
    return int(row["xact_commit"])


def test_a_replica_whose_every_row_the_guard_holds_costs_about_what_an_idle_one_does(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """The same replica, idle and then with three retires the guard holds: the database's commits a
    second over a 10 s window each. Claiming in a loop was tens a second per replica."""
    for sid in ("a", "b", "c"):
        add_execution(execs, kube, sid)
    settings = daemon_settings(db_url, kube, replication_guard=frozenset(MISSING))
    with DaemonThread(settings):
        threading_event_wait(2.0)  # past the start-up's own statements
        before = commits(execs)
        threading_event_wait(10.0)  # the measured window, idle
        idle = (commits(execs) - before) / 10.0
        for sid in ("a", "b", "c"):
            retire(execs, sid)
        marked = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE guard_lsn IS NOT NULL"
        wait_until(lambda: execs.execute(marked).fetchone()["n"] == 3, what="the guard's mark on the three rows")
        threading_event_wait(outbox.GUARD_RECHECK_MAX_SECONDS * 3)  # the recheck backs off to its last interval
        before = commits(execs)
        threading_event_wait(10.0)  # the measured window, holding
        holding = (commits(execs) - before) / 10.0
    # a recheck (a mark, a claim, a next-due read) every GUARD_RECHECK_MAX_SECONDS on top of idle's reads
    assert holding <= 1.5 * idle + 2.0, (idle, holding)
    rows = execs.execute("SELECT status, attempts FROM pod_sweeper.outbox").fetchall()
    assert [(r["status"], r["attempts"]) for r in rows] == [("pending", 0)] * 3, rows  # held: never claimed


def test_the_guards_view_counts_the_held_rows_and_names_a_missing_standby_as_missing(
    pg: psycopg.Connection[Any], db_url: str
) -> None:
    _insert(pg, 4)

    async def view() -> outbox.GuardLag:
        async with db.connection(settings_for(db_url)) as conn:
            await outbox.guard_mark(conn, cluster="default")
            return await outbox.guard_lag(conn, MISSING, cluster="default")

    seen = run(view())
    assert (seen.connected, seen.missing, seen.lag_bytes, seen.kept_back_rows) == (0, 1, None, 4), seen
    assert seen.oldest_kept_back_seconds >= 0
    pg.execute("UPDATE pod_sweeper.outbox SET enqueued_at = now() - interval '10 minutes' WHERE sandbox_id = 's1'")
    seen = run(view())  # a reopened row (a new enqueue) needs a new mark, then is held again
    assert seen.kept_back_rows == 4 and seen.oldest_kept_back_seconds >= 600, seen
