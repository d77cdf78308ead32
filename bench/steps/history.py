"""History: what a year of done rows costs the reads. Every on-call command (the real CLI, its start
included) and every periodic read and DBA query, timed on a database holding the open rows alone and on
one that also holds ten million done rows (the quick run: one million), alternated; the key is the ratio
full/empty, whose target is flat (at most 1.5). Then what the history costs to keep: bytes per retire on
disk, and the retention's prune (rows a second, WAL a row) at that size."""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from rig import Rig

from pod_sweeper.store import queries
from pod_sweeper.store.db import connection
from pod_sweeper.store.sweep import retention
from pod_sweeper.tasks.loops.retention import RETENTION_BATCH, RETENTION_PAUSE_SECONDS
from steps.busy import wal_position

SEED = Path(__file__).resolve().parents[1] / "history_seed.sql"
OPEN, DEAD = 1_000, 50

COMMANDS: dict[str, list[str]] = {
    "status": ["status"],
    "status_json": ["status", "--json"],
    "explain_name": ["explain", "ns-5/pod-12345"],
    "explain_bare_name": ["explain", "pod-12345"],
    "explain_sandbox": ["explain", "sb-12345"],
    "explain_uid": ["explain", "00000000-0000-4000-8000-" + f"{12345:012x}"],
    "explain_open": ["explain", "ns-7/open-7"],
    "retry_dead_preview": ["retry", "--dead", "--dry-run"],
    "discard_preview": ["discard", "--status", "pending", "--namespace", "ns-3", "--reason", "b", "--dry-run"],
}
# The replica's periodic reads (the metrics refresher's) and the DBA queries, as statements.
READS = ["status_lag", "cluster_gauges", "cluster_rates", "xmin_horizon", "status_controls"]


def seed(url: str, done: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in SEED.read_text().split(";\n"):
            if statement.strip():
                conn.execute(statement, {"done": done, "open": OPEN, "dead": DEAD})  # type: ignore[call-overload]
        conn.execute("INSERT INTO pod_sweeper.breaker (cluster) VALUES ('default'), ('east') ON CONFLICT DO NOTHING")
        conn.execute("VACUUM ANALYZE")


def command_seconds(url: str, args: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POD_SWEEPER_")}
    env["POD_SWEEPER_DATABASE_URL"] = url
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pod_sweeper", *args], env=env, capture_output=True, check=True, timeout=120)
    return time.perf_counter() - started


def statement_ms(conn: psycopg.Connection[Any], name: str) -> float:
    started = time.perf_counter()
    conn.execute(queries.load(name)).fetchall()
    return (time.perf_counter() - started) * 1000


def host_writer(url: str, stop: threading.Event, worst: list[float]) -> None:
    """A host writer retiring an execution every 50 ms (each enqueues a row) until ``stop``: the worst
    retire's seconds go in ``worst``."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
            " SELECT 'w' || g, 1, 'ns', 'w' || g, gen_random_uuid() FROM generate_series(1, 100000) g"
        )
        n = 0
        while not stop.wait(0.05):  # the writer's own pace, not a wait on a condition
            n += 1
            started = time.perf_counter()
            conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s AND generation = 1", (f"w{n}",))
            worst[0] = max(worst[0], time.perf_counter() - started)


def footprint(rig: Rig, url: str, done: int) -> dict[str, float]:
    """Bytes per done row on disk (the outbox and its indexes, the attempts and theirs), and the
    retention's prune of the oldest day at this size, as the daemon runs it (batches of RETENTION_BATCH)
    while a host writer retires every 50 ms: rows a second, WAL bytes a row, the writer's worst retire."""
    with psycopg.connect(url, autocommit=True) as conn:
        sizes = conn.execute(
            "SELECT pg_table_size('pod_sweeper.outbox'), pg_indexes_size('pod_sweeper.outbox'),"
            " pg_table_size('pod_sweeper.attempts'), pg_indexes_size('pod_sweeper.attempts')"
        ).fetchone()
        assert sizes is not None
    stop, worst = threading.Event(), [0.0]
    writer = threading.Thread(target=host_writer, args=(url, stop, worst))
    writer.start()

    async def prune() -> int:
        total = 0
        async with connection(rig.settings(url)) as conn:
            while (
                deleted := await retention.prune_batch(conn, retention_seconds=6 * 86400, batch=RETENTION_BATCH)
            ) == (RETENTION_BATCH):
                total += deleted
                await asyncio.sleep(RETENTION_PAUSE_SECONDS)  # the daemon's pause between batches
            return total + (deleted or 0)

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            before = wal_position(conn)
            started = time.perf_counter()
            pruned = asyncio.run(prune())
            seconds = time.perf_counter() - started
            wal = wal_position(conn) - before
    finally:
        stop.set()
        writer.join()
    return {
        "history_bytes_per_retire_outbox": round(sizes[0] / done),
        "history_bytes_per_retire_outbox_indexes": round(sizes[1] / done),
        "history_bytes_per_retire_attempts": round(sizes[2] / done),
        "history_bytes_per_retire_attempts_indexes": round(sizes[3] / done),
        "history_bytes_per_retire": round(sum(sizes) / done),
        "prune_rows_per_second": round(pruned / seconds),
        "prune_wal_bytes_per_row": round(wal / max(pruned, 1)),  # the host writer's retires included
        "prune_host_retire_worst_ms": round(worst[0] * 1000, 1),
    }


def history(rig: Rig, done: int) -> None:
    empty_url, full_url = rig.fresh_db(), rig.fresh_db()
    seed(empty_url, 0)
    started = time.monotonic()
    seed(full_url, done)
    print(f"  history: seeded {done} done rows in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    runs = 3 if rig.quick else 5
    times: dict[str, dict[str, list[float]]] = {}
    for _ in range(runs):  # alternated: a busy moment on the machine weighs on both sides alike
        for side, url in (("empty", empty_url), ("full", full_url)):
            for name, args in COMMANDS.items():
                times.setdefault(name, {"empty": [], "full": []})[side].append(command_seconds(url, args))
            with psycopg.connect(url, autocommit=True) as conn:
                for name in READS + [f"dba/{n}" for n in queries.dba_query_names()]:
                    samples = [statement_ms(conn, name) for _ in range(5)]
                    times.setdefault(name, {"empty": [], "full": []})[side] += samples
    ratios: dict[str, float] = {}
    for name, sides in times.items():
        empty, full = statistics.median(sides["empty"]), statistics.median(sides["full"])
        ratios[name] = full / empty
        unit = "s" if name in COMMANDS else "ms"
        print(
            f"    {name}: {empty:.3f} {unit} empty, {full:.3f} {unit} with {done} done rows ({full / empty:.2f}x)",
            file=sys.stderr,
            flush=True,
        )
        key = name.replace("dba/", "dba_")
        rig.results[f"history_{key}_{unit}"] = round(full, 3)
    rig.results["history_ratio_max"] = round(max(ratios.values()), 2)
    rig.results["history_ratio_worst"] = max(ratios, key=lambda k: ratios[k])
    rig.results.update(footprint(rig, full_url, done))
