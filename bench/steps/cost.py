"""What the sweep costs the host's primary: the host's own workload alone, then the same swept, side by side
on one PostgreSQL in one run, and three replicas idle.

The host's workload: ``rate`` executions a second, each created (an INSERT naming its live pod) and
retired (an UPDATE) in a transaction of its own, for ``seconds``. Alone, the table has no trigger and no
replica runs; the floor, the least any trigger-fed outbox costs (``FLOOR_TRIGGER``: one value inserted
into a table without an index, nothing swept); the nearest design's storage (steps/sketch.py: an
insert-only intake, a claim no index sees, one statement a turn; its database side alone); swept, the
table is attached and ``replicas`` replicas sweep it at the shipped defaults; gathering, the same with
``POD_SWEEPER_GATHER_SECONDS`` at ``GATHER_SECONDS`` (off by default), on a database of its own.
Per execution, each side prints PostgreSQL's CPU (every process of the cluster, the backends that exited
during the window included: their time is in the postmaster's children's), the WAL, the transactions
committed (every database's) and, swept, the claims; then the sweep's share over the host's own.
Idle: the same replicas with nothing to sweep, their transactions and WAL a second.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
from rig import NS, DaemonThread, Rig

from pod_sweeper.core.settings import Settings
from steps import sketch
from steps.busy import SHIPPED, postgres_cpu_seconds, wal_position


def commits(conn: psycopg.Connection[Any], *, here_only: bool = False) -> int:
    """Transactions committed so far in every database of the cluster (``here_only``: in this one; a
    fresh stats snapshot). Every database's, under load: the autovacuum of what the load wrote counts."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT sum(xact_commit)::bigint FROM pg_stat_database WHERE NOT %s OR datname = current_database()",
        (here_only,),
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


@contextmanager
def host(url: str, rate: float, pods: list[tuple[str, str]]) -> Iterator[list[int]]:
    """The host's workload: for each pod, a transaction that creates its execution and one that retires
    it, ``rate`` executions a second; yields [executions retired so far]."""
    retired = [0]
    stop = threading.Event()

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            start = time.monotonic()
            for i, (name, uid) in enumerate(pods):
                if stop.is_set():
                    return
                time.sleep(max(0.0, start + i / rate - time.monotonic()))  # pacing the host
                conn.execute(
                    "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
                    " VALUES (%s, 1, %s, %s, %s)",
                    (f"s{i}", NS, name, uid),
                )
                conn.execute(
                    "UPDATE executions SET active = false WHERE sandbox_id = %s AND generation = 1", (f"s{i}",)
                )
                retired[0] = i + 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield retired
    finally:
        stop.set()
        thread.join(30)


def statement_costs(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, float, int, int]]:
    """Each statement's calls, total time (ms, planning included), WAL bytes and full-page images so
    far, by its first line (pg_stat_statements, where loaded; else nothing)."""
    try:
        rows = conn.execute(
            "SELECT query, calls, total_exec_time + total_plan_time, wal_bytes, wal_fpi FROM pg_stat_statements"
            " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    except psycopg.Error:
        return {}
    costs: dict[str, tuple[int, float, int, int]] = {}
    for query, calls, ms, wal, fpi in rows:
        name = query.strip().splitlines()[0][:70]
        c, t, w, f = costs.get(name, (0, 0.0, 0, 0))
        costs[name] = (c + calls, t + ms, w + int(wal), f + fpi)
    return costs


def process_cpu(pid: int) -> float:
    """One process's user and system CPU so far, in seconds (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            values = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(values[11]) + int(values[12])) / os.sysconf("SC_CLK_TCK")


def cluster_processes(conn: psycopg.Connection[Any]) -> dict[int, str]:
    """Every process of the cluster by what it is: its backend type, and a client's application name."""
    rows = conn.execute(
        "SELECT pid, backend_type, coalesce(nullif(application_name, ''), '-') FROM pg_stat_activity"
    ).fetchall()
    return {pid: kind if kind != "client backend" else f"client {app}" for pid, kind, app in rows}


def window(url: str, rate: float, seconds: float, pods: list[tuple[str, str]]) -> dict[str, float]:
    """The host's workload over ``seconds`` (whatever runs beside it already running): the cluster's CPU,
    WAL, commits and claims over the window, per execution retired in it."""
    with psycopg.connect(url, autocommit=True) as probe, contextlib.suppress(psycopg.Error):
        probe.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    with psycopg.connect(url, autocommit=True) as probe, host(url, rate, pods) as retired:
        s0 = statement_costs(probe)
        processes = cluster_processes(probe)
        cpu0 = {pid: process_cpu(pid) for pid in processes}
        c0, w0, p0 = commits(probe), wal_position(probe), postgres_cpu_seconds()
        time.sleep(seconds)  # the measured window
        n = retired[0]
        c1, w1, p1 = commits(probe), wal_position(probe), postgres_cpu_seconds()
        s1 = statement_costs(probe)
        by_kind: dict[str, float] = {}
        for pid, kind in processes.items():  # the processes there from the start (the rest: started since)
            by_kind[kind] = by_kind.get(kind, 0.0) + process_cpu(pid) - cpu0[pid]
    others = (p1 - p0) - sum(by_kind.values())
    kinds = sorted(((cpu, kind) for kind, cpu in by_kind.items()), reverse=True)
    print(
        "      PostgreSQL's CPU per execution by process: "
        + ", ".join(f"{kind} {1000 * cpu / n:.3f} ms" for cpu, kind in kinds if cpu > 0)
        + f", started or ended in the window {1000 * others / n:.3f} ms",
        file=sys.stderr,
        flush=True,
    )
    # Where it went: the statements PostgreSQL spent most time on, per execution, with their WAL.
    zero = (0, 0.0, 0, 0)
    deltas = []
    for name, (calls, ms, wal, fpi) in s1.items():
        c0_, t0_, w0_, f0_ = s0.get(name, zero)
        deltas.append((calls - c0_, ms - t0_, wal - w0_, fpi - f0_, name))
    for calls, ms, wal, fpi, name in sorted(deltas, key=lambda d: (d[1], d[0]), reverse=True)[:16]:
        if calls:
            line = f"{calls / n:6.2f} calls {ms / n:6.3f} ms {wal / n:6.0f} B WAL ({fpi / n:.2f} full pages)  {name!r}"
            print("      " + line, file=sys.stderr, flush=True)
    figures = {
        "executions": float(n),
        "cpu_ms": 1000 * (p1 - p0) / n,
        "wal_bytes": (w1 - w0) / n,
        "transactions": (c1 - c0) / n,
        "commits_at_start": float(c0),
    }
    if claimed := [c1_ - s0.get(k, (0, 0.0, 0, 0))[0] for k, (c1_, *_) in s1.items() if k.startswith("-- Claim up to")]:
        figures["claims"] = sum(claimed) / n  # the claim statements, from the statement costs read above
    return figures


def counted_through_exit(url: str, figures: dict[str, float]) -> None:
    """The window's transactions a retire again, read once its backends have exited. A backend reports its
    commits with its next statement (at most about once a second) or at its exit; one that only LISTENs
    reads each NOTIFY in a transaction of its own and runs no statement after it, so the shipped
    replicas' listeners, hearing one every few milliseconds under load, reported none in the window:
    1.23 a retire counted there was 4.38. Read after the exit, the count holds them, and the window's
    last drain and the sweepers' stops (a few statements each, against thousands of retires). Every side
    is read so, the host's own backend too (its last second's commits)."""
    with psycopg.connect(url, autocommit=True) as probe:
        figures["transactions"] = (commits(probe) - figures["commits_at_start"]) / figures["executions"]


def idle_load(url: str, seconds: float) -> dict[str, float]:
    """Commits and WAL a second over ``seconds`` (whatever runs already running)."""
    with psycopg.connect(url, autocommit=True) as probe:
        s0 = statement_costs(probe)
        # This database's commits: the other databases' autovacuum visits are not the replicas'.
        c0, w0, t0 = commits(probe, here_only=True), wal_position(probe), time.monotonic()
        time.sleep(seconds)  # the measured window
        c1, w1, t1 = commits(probe, here_only=True), wal_position(probe), time.monotonic()
        s1 = statement_costs(probe)
    calls = sorted(((s1[k][0] - s0.get(k, (0, 0.0, 0, 0))[0], k) for k in s1), reverse=True)
    print(
        "      idle, statements a second: "
        + ", ".join(f"{c / (t1 - t0):.2f} {k[:40]!r}" for c, k in calls[:20] if c > 0),
        file=sys.stderr,
        flush=True,
    )
    # The probe's own two reads (the snapshot clears and the sums) are not the replicas': taken out.
    return {"tps": max(0.0, (c1 - c0 - 2) / (t1 - t0)), "wal_bytes_per_s": (w1 - w0) / (t1 - t0)}


def done_latencies(url: str) -> list[float]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM done_at - enqueued_at) * 1000 FROM pod_sweeper.outbox WHERE status = 'done'"
        ).fetchall()
    return sorted(float(r[0]) for r in rows)


# The floor of any trigger-fed outbox: the least a retire's enqueue can be, one value inserted by a
# PL/pgSQL trigger into a table without an index, in the host's transaction (and nothing swept).
FLOOR_TRIGGER = """
CREATE TABLE floor_outbox (pod_uid uuid);
CREATE FUNCTION floor_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO floor_outbox VALUES (NEW.pod_uid);
    RETURN NULL;
END $$;
CREATE TRIGGER floor_enqueue AFTER UPDATE OF active ON executions
    FOR EACH ROW WHEN (OLD.active AND NOT NEW.active) EXECUTE FUNCTION floor_enqueue();
"""


# POD_SWEEPER_GATHER_SECONDS in the window that measures it (docs/performance.md quotes its figures).
GATHER_SECONDS = 0.05


def cost(rig: Rig, rate: float, seconds: float, replicas: int, idle_seconds: float) -> None:
    n = int(rate * (seconds + 10))
    rig.kube.reset()
    names = [f"c{i}" for i in range(5 * n)]
    uids = rig.kube.create_pods(names)
    pods = list(zip(names, uids, strict=True))
    url = rig.fresh_db()
    with psycopg.connect(url, autocommit=True) as conn, contextlib.suppress(psycopg.Error):
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")  # before the idle window
    settings = rig.settings(url, **SHIPPED)

    def sweeping(stack: ExitStack, settings: Settings) -> None:
        for i in range(replicas):
            stack.enter_context(DaemonThread(settings.model_copy(update={"replica_id": f"cost-{i}"}))).ready()

    def swept_window(url: str, pods: list[tuple[str, str]], **update: Any) -> tuple[dict[str, float], float]:
        """The replicas (the shipped settings, with ``update``) sweeping the host's workload on ``url``;
        its figures, counted through the replicas' exit, and the window's own count of transactions."""
        with ExitStack() as stack:
            sweeping(stack, rig.settings(url, **SHIPPED).model_copy(update=update))
            time.sleep(12.0)  # settle, as above: the start-up's counts are not the sweep's
            with psycopg.connect(rig.cluster.url(), autocommit=True) as conn:
                conn.execute("CHECKPOINT")
            figures = window(url, rate, seconds, pods)
            deadline = time.monotonic() + 60
            with psycopg.connect(url, autocommit=True) as probe:
                while time.monotonic() < deadline and probe.execute(
                    "SELECT EXISTS (SELECT 1 FROM pod_sweeper.outbox WHERE status IN ('pending', 'claimed'))"
                ).fetchone() != (False,):
                    time.sleep(0.1)  # the benchmark's own sampling interval
            in_window = figures["transactions"]
        counted_through_exit(url, figures)
        return figures, in_window

    # Idle first, on a quiet cluster: the other windows' autovacuum and checkpoints would be in its WAL.
    with ExitStack() as stack:
        sweeping(stack, settings)
        # Settle: a backend reports its counts to pg_stat_database up to 10 s after its last statement,
        # so the replicas' start-up (their first claims and gauges) must be counted before the window.
        time.sleep(12.0)
        idle = idle_load(url, idle_seconds)
    with psycopg.connect(rig.cluster.url(), autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # each window starts from a checkpoint: full-page images alike
    alone_url = rig.fresh_db(swept=False)
    alone = window(alone_url, rate, seconds, pods[:n])
    counted_through_exit(alone_url, alone)
    floor_url = rig.fresh_db(swept=False)
    with psycopg.connect(floor_url, autocommit=True) as conn:
        conn.execute(FLOOR_TRIGGER)
    with psycopg.connect(rig.cluster.url(), autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    floor = window(floor_url, rate, seconds, pods[2 * n : 3 * n])
    counted_through_exit(floor_url, floor)
    # The nearest design's storage (steps/sketch.py), its one sweeper beside the same host workload.
    sketch_url = rig.fresh_db(swept=False)
    with psycopg.connect(sketch_url, autocommit=True) as conn:
        conn.execute(sketch.DDL)
    with sketch.sweeper(sketch_url) as recorded:
        with psycopg.connect(rig.cluster.url(), autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        sketched = window(sketch_url, rate, seconds, pods[3 * n :])
        sketched["recorded"] = float(recorded[0])
    counted_through_exit(sketch_url, sketched)
    sketched["bytes_per_done_row"] = sketch.bytes_per_done_row(sketch_url)
    swept, in_window = swept_window(url, pods[n : 2 * n])
    latencies = done_latencies(url)
    # The same with gathering on (POD_SWEEPER_GATHER_SECONDS, off by default), on a database of its own.
    gather_url = rig.fresh_db()
    gathered, gathered_in_window = swept_window(gather_url, pods[4 * n :], gather_seconds=GATHER_SECONDS)
    gathered_latencies = done_latencies(gather_url)
    sides = (("alone", alone), ("floor", floor), ("sketch", sketched), ("swept", swept), ("gathering", gathered))
    for side, figures in sides:
        print(
            f"    cost {side}: {figures['executions']:.0f} executions; per execution {figures['cpu_ms']:.3f} ms of"
            f" PostgreSQL's CPU, {figures['wal_bytes']:.0f} B of WAL, {figures['transactions']:.2f} transactions"
            + (f", {figures['claims']:.2f} claims" if "claims" in figures else ""),
            file=sys.stderr,
            flush=True,
        )
    share = {k: (swept[k] - alone[k]) / alone[k] for k in ("cpu_ms", "wal_bytes")}
    near = {k: (sketched[k] - alone[k]) / alone[k] for k in ("cpu_ms", "wal_bytes")}
    print(
        f"    cost: the nearest design's storage (steps/sketch.py, one sweeper, no Kubernetes) adds"
        f" {near['cpu_ms']:.2f}x the host's CPU, {near['wal_bytes']:.2f}x its WAL,"
        f" {sketched['transactions'] - alone['transactions']:.2f} transactions per retire;"
        f" {sketched['bytes_per_done_row']:.0f} B on disk a done row ({sketched['recorded']:.0f} recorded)",
        file=sys.stderr,
        flush=True,
    )
    least = {k: (floor[k] - alone[k]) / alone[k] for k in ("cpu_ms", "wal_bytes")}
    print(
        f"    cost: the floor of a trigger-fed outbox (one value inserted, nothing swept) is {least['cpu_ms']:.2f}x"
        f" the host's CPU, {least['wal_bytes']:.2f}x its WAL",
        file=sys.stderr,
        flush=True,
    )
    print(
        f"    cost: the sweep's share {share['cpu_ms']:.2f}x the host's CPU, {share['wal_bytes']:.2f}x its WAL,"
        f" {swept['transactions'] - alone['transactions']:.2f} transactions more per retire"
        f" ({in_window - alone['transactions']:.2f} as the window's own counts said);"
        f" retire to done p99 {latencies[int(len(latencies) * 0.99) - 1]:.0f} ms;"
        f" idle, {replicas} replicas: {idle['tps']:.2f} transactions/s, {idle['wal_bytes_per_s']:.0f} B/s of WAL",
        file=sys.stderr,
        flush=True,
    )
    gathered_share = {k: (gathered[k] - alone[k]) / alone[k] for k in ("cpu_ms", "wal_bytes")}
    print(
        f"    cost: gathering {GATHER_SECONDS} s, the sweep's share {gathered_share['cpu_ms']:.2f}x the host's CPU,"
        f" {gathered_share['wal_bytes']:.2f}x its WAL,"
        f" {gathered['transactions'] - alone['transactions']:.2f} transactions more per retire"
        f" ({gathered_in_window - alone['transactions']:.2f} in the window);"
        f" retire to done p50 {statistics.median(gathered_latencies):.0f} ms,"
        f" p99 {gathered_latencies[int(len(gathered_latencies) * 0.99) - 1]:.0f} ms",
        file=sys.stderr,
        flush=True,
    )
    results = rig.results
    results["cost_gather_cpu_share"] = round(gathered_share["cpu_ms"], 2)
    results["cost_gather_wal_share"] = round(gathered_share["wal_bytes"], 2)
    results["cost_gather_added_transactions_per_retire"] = round(gathered["transactions"] - alone["transactions"], 2)
    if "claims" in gathered:
        results["cost_gather_claims_per_retire"] = round(gathered["claims"], 2)
    results["cost_gather_done_p50_ms"] = round(statistics.median(gathered_latencies))
    results["cost_gather_done_p99_ms"] = round(gathered_latencies[int(len(gathered_latencies) * 0.99) - 1])
    for k in ("cpu_ms", "wal_bytes", "transactions"):
        results[f"cost_alone_{k}_per_execution"] = round(alone[k], 3)
        results[f"cost_swept_{k}_per_execution"] = round(swept[k], 3)
    if "claims" in swept:
        results["cost_claims_per_retire"] = round(swept["claims"], 2)
    for k in ("cpu_ms", "wal_bytes", "transactions"):
        results[f"cost_floor_{k}_per_execution"] = round(floor[k], 3)
    results["cost_sketch_cpu_share"] = round(near["cpu_ms"], 2)
    results["cost_sketch_wal_share"] = round(near["wal_bytes"], 2)
    results["cost_sketch_added_transactions_per_retire"] = round(sketched["transactions"] - alone["transactions"], 2)
    results["cost_sketch_bytes_per_done_row"] = round(sketched["bytes_per_done_row"])
    results["cost_floor_cpu_share"] = round(least["cpu_ms"], 2)
    results["cost_floor_wal_share"] = round(least["wal_bytes"], 2)
    results["cost_cpu_share"] = round(share["cpu_ms"], 2)
    results["cost_wal_share"] = round(share["wal_bytes"], 2)
    results["cost_added_transactions_per_retire"] = round(swept["transactions"] - alone["transactions"], 2)
    results["cost_added_transactions_per_retire_in_window"] = round(in_window - alone["transactions"], 2)
    results["cost_done_p99_ms"] = round(latencies[int(len(latencies) * 0.99) - 1])
    results["cost_done_p50_ms"] = round(statistics.median(latencies))
    results["cost_idle_tps"] = round(idle["tps"], 2)
    results["cost_idle_wal_bytes_per_s"] = round(idle["wal_bytes_per_s"])
