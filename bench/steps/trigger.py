"""The trigger's cost: retires per second through pgbench with the trigger (the wakeup flag clear and
armed) against the same table without it, and the CPU one backend spends on a retire with and without it
(CPU time, not wall time: a figure that another process on the machine barely moves)."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql
from rig import Rig

from harness.postgres import find_bindir

RETIRE_ROWS = 100_000


def seed_retire_tables(url: str) -> None:
    """``RETIRE_ROWS`` active executions with pod UIDs, and ``plain``: a copy of the table without the trigger."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
            " SELECT 's' || g, 1, 'ns', 'p' || g, gen_random_uuid() FROM generate_series(1, %s) g",
            (RETIRE_ROWS,),
        )
        conn.execute("CREATE TABLE plain (LIKE executions INCLUDING ALL)")
        conn.execute("INSERT INTO plain SELECT * FROM executions")
        conn.execute("VACUUM ANALYZE")


def retire_tps(url: str, table: str, seconds: int) -> float:
    """pgbench, 8 writers for ``seconds``, one retire per transaction on ``table``: transactions/s.
    Each retire names a fresh UID, so with the trigger every transaction enqueues one row."""
    script = Path(tempfile.mkdtemp()) / "retire.sql"
    script.write_text(
        f"\\set id random(1, {RETIRE_ROWS})\n"
        f"UPDATE {table} SET active = false, pod_uid = gen_random_uuid() "
        "WHERE sandbox_id = 's' || :id AND generation = 1;\n"
    )
    out = subprocess.run(
        [str(find_bindir() / "pgbench"), "-n", "-c", "8", "-j", "2", "-T", str(seconds), "-f", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return next(float(line.split("=")[1].split()[0]) for line in out.splitlines() if line.startswith("tps"))


def interleaved(url: str, rounds: int, measure: Callable[[str], float]) -> tuple[float, float, float]:
    """``measure`` of a table, rounds interleaved: with the trigger and the wakeup flag clear, on the
    copy without the trigger, with the trigger and the flag armed; the medians, in that order."""
    figures: dict[str, list[float]] = {"clear": [], "armed": [], "plain": []}
    for _ in range(rounds):
        for case in ("clear", "plain", "armed"):
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("UPDATE pod_sweeper.wakeup SET armed = %s", (case == "armed",))
            figures[case].append(measure("plain" if case == "plain" else "executions"))
    clear, armed, without = (statistics.median(figures[k]) for k in ("clear", "armed", "plain"))
    return clear, armed, without


def trigger_ratio(rig: Rig) -> None:
    """8 concurrent writers, one retire per transaction (pgbench), with and without the trigger,
    interleaved; with the trigger twice: the wakeup flag clear (a sweeper is claiming, so retires
    do not NOTIFY: migration 0007) and armed (every sweeper asleep: each retire NOTIFYs)."""
    url = rig.fresh_db()
    seed_retire_tables(url)
    rounds = 2 if rig.quick else 4
    seconds = 3 if rig.quick else 8
    clear, armed, without = interleaved(url, rounds, lambda table: retire_tps(url, table, seconds))
    rig.results.update(
        trigger_tps=round(clear),
        trigger_armed_tps=round(armed),
        no_trigger_tps=round(without),
        trigger_ratio=round(clear / without, 3),
        trigger_ratio_armed=round(armed / without, 3),
    )


def backend_cpu_us_per_retire(url: str, table: str, rows: int) -> float:
    """One backend's CPU (user and system, from /proc) per row while one UPDATE retires ``rows`` rows of
    ``table``, each naming a fresh UID: microseconds. With the trigger, the flag as the caller left it."""
    tick = os.sysconf("SC_CLK_TCK")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pid = row[0]

        def cpu() -> float:
            with open(f"/proc/{pid}/stat") as f:
                values = f.read().rsplit(")", 1)[1].split()
            return (int(values[11]) + int(values[12])) / tick

        name = sql.Identifier(table)
        conn.execute(
            sql.SQL("UPDATE {} SET active = true, pod_uid = gen_random_uuid() WHERE generation = 1").format(name)
        )
        conn.execute("TRUNCATE pod_sweeper.outbox CASCADE")
        before = cpu()
        conn.execute(
            sql.SQL(
                "UPDATE {} SET active = false, pod_uid = gen_random_uuid() WHERE generation = 1"
                " AND sandbox_id IN (SELECT 's' || g FROM generate_series(1, %s) g)"
            ).format(name),
            (rows,),
        )
        return (cpu() - before) / rows * 1e6


def trigger_cpu(rig: Rig) -> None:
    """What a retire costs the host's backend in CPU, with the trigger (the flag clear; armed, so each row
    reaches the NOTIFY, folded into one for the statement) against the same table without it: medians
    of rounds interleaved. ``trigger_cpu_us_per_retire`` less ``no_trigger_cpu_us_per_retire`` is what
    the enqueue adds to each of the host's retires."""
    url = rig.fresh_db()
    seed_retire_tables(url)
    rows = 20_000 if rig.quick else RETIRE_ROWS
    clear, armed, without = interleaved(
        url, 3 if rig.quick else 7, lambda table: backend_cpu_us_per_retire(url, table, rows)
    )
    rig.results.update(
        trigger_cpu_us_per_retire=round(clear, 1),
        trigger_armed_cpu_us_per_retire=round(armed, 1),
        no_trigger_cpu_us_per_retire=round(without, 1),
    )
