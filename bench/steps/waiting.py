"""Waiting: what a replica costs the host's primary while nothing can be swept. One replica at the
shipped defaults, first idle (no open row), then with 100 retired rows that a reason keeps back: the
replication guard (a named standby that is not connected), a pause of the whole cluster, a tripped
breaker. For each: PostgreSQL's transactions a second, WAL bytes a second and CPU, over a window, and
the ratio to idle; the target is at most 1.5. Beside the cluster's WAL, the WAL of every statement a
client ran (pg_stat_statements, where loaded): what autovacuum writes is not a statement's, and its first
visit of a freshly made database (each case has one) falls in some windows and not others."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
from rig import DaemonThread, Rig

from steps.busy import SHIPPED, postgres_cpu_seconds, wal_position


def measure(url: str, seconds: float) -> dict[str, float]:
    """The database's commits, WAL and PostgreSQL's CPU over ``seconds``, per second."""
    with psycopg.connect(url, autocommit=True) as conn:
        query = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"

        def commits() -> int:
            row = conn.execute(query).fetchone()
            conn.execute("SELECT pg_stat_clear_snapshot()")
            return int(row[0]) if row else 0

        s0 = statements_wal(conn)
        c0, w0, p0, t0 = commits(), wal_position(conn), postgres_cpu_seconds(), time.monotonic()
        time.sleep(seconds)  # the measured window
        c1, w1, p1, t1 = commits(), wal_position(conn), postgres_cpu_seconds(), time.monotonic()
        s1 = statements_wal(conn)
    span = t1 - t0
    return {
        "tps": (c1 - c0) / span,
        "wal_bytes_per_s": (w1 - w0) / span,
        "cpu_ms_per_s": 1000 * (p1 - p0) / span,
        "statements_wal_bytes_per_s": (s1 - s0) / span if s0 is not None and s1 is not None else float("nan"),
    }


def statements_wal(conn: psycopg.Connection[Any]) -> int | None:
    """The WAL every statement of every client wrote so far (pg_stat_statements; None without it)."""
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            row = conn.execute("SELECT coalesce(sum(wal_bytes), 0)::bigint FROM pg_stat_statements").fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row else 0


def keep_back(reason: str) -> Callable[[psycopg.Connection[Any]], None]:
    def apply(conn: psycopg.Connection[Any]) -> None:
        if reason == "pause":
            conn.execute(
                "INSERT INTO pod_sweeper.pauses (cluster, reason, actor, until)"
                " VALUES ('default', 'bench', 'bench', now() + interval '1 hour')"
            )
        elif reason == "breaker":
            conn.execute(
                "INSERT INTO pod_sweeper.breaker (cluster, tripped_at, reason, tripped_by) VALUES"
                " ('default', now(), 'bench', 'bench') ON CONFLICT (cluster) DO UPDATE SET tripped_at = now(),"
                " reason = 'bench'"
            )

    return apply


def waiting(rig: Rig, seconds: float) -> None:
    cases: dict[str, dict[str, Any]] = {
        "idle": {},
        "guard": {"replication_guard": frozenset({"no-such-standby"})},
        "pause": {},
        "breaker": {},
    }
    figures: dict[str, dict[str, float]] = {}
    for case, overrides in cases.items():
        url = rig.fresh_db()
        with psycopg.connect(url, autocommit=True) as conn:
            keep_back(case)(conn)
        settings = rig.settings(url, **{**SHIPPED, **overrides, "replica_id": f"waiting-{case}"})
        with DaemonThread(settings) as daemon:
            if case != "breaker":  # a replica whose breaker is tripped is not ready, by design
                daemon.ready()
            if case != "idle":
                rig.backlog(url, 100)
            time.sleep(5.0)  # settle: the first claims, the guard's recheck backing off to its last interval
            figures[case] = measure(url, seconds)
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM pod_sweeper.outbox WHERE status = 'done'").fetchone()
            assert case == "idle" or (row and row[0] == 0), f"{case}: rows were swept"
    idle = figures["idle"]
    for case, got in figures.items():
        ratio = max(got[k] / idle[k] if idle[k] else 1.0 for k in ("tps", "wal_bytes_per_s", "cpu_ms_per_s"))
        print(
            f"    waiting {case}: {got['tps']:.1f} transactions/s, {got['wal_bytes_per_s']:.0f} B/s of WAL,"
            f" {got['cpu_ms_per_s']:.1f} ms/s of PostgreSQL's CPU ({ratio:.2f}x idle at worst);"
            f" the statements' own WAL {got['statements_wal_bytes_per_s']:.0f} B/s",
            file=sys.stderr,
            flush=True,
        )
        rig.results[f"waiting_{case}_tps"] = round(got["tps"], 1)
        rig.results[f"waiting_{case}_wal_bytes_per_s"] = round(got["wal_bytes_per_s"])
        rig.results[f"waiting_{case}_statements_wal_bytes_per_s"] = round(got["statements_wal_bytes_per_s"], 1)
        if case != "idle":
            rig.results[f"waiting_{case}_ratio"] = round(ratio, 2)
