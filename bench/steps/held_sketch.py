"""The nearest design's storage (steps/sketch.py) under a snapshot held open, as step ``held snapshot``
holds one over the shipped outbox: does an insert-only intake stay flat where the outbox's updated rows
do not (issue 51: CPU per row at most 1.25x its base after two hours)?

Two sketches, each on a database of its own beside the same host workload as step ``cost`` (an INSERT
and an UPDATE a transaction, ``rate`` a second): ``cursor row``, the sketch as step ``cost`` measures it
(its cursor one row, updated every turn), and ``insert-only cursor`` (``sketch.CLAIMS_TURN``: a row
inserted a turn, nothing updated). One REPEATABLE READ transaction is opened after two minutes (or a
quarter) and held to the end. A line every 15 s: rows retired and recorded, how far the sweeper is
behind, PostgreSQL's CPU (every process of the cluster) and WAL per row recorded, and the statements
PostgreSQL spent most time on. One sweeper, no Kubernetes: the database side alone, as in ``cost``.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
import uuid
from contextlib import ExitStack

import psycopg
from rig import Rig

from steps import sketch
from steps.busy import postgres_cpu_seconds, statement_times, top_statements, wal_position
from steps.cost import host

VARIANTS = (
    ("cursor row", "held_sketch", "", sketch.TURN),
    ("insert-only cursor", "held_sketch_insert_only", sketch.CLAIMS_DDL, sketch.CLAIMS_TURN),
)


def held_sketch(rig: Rig, rate: float, seconds: float) -> None:
    for label, key, extra_ddl, turn in VARIANTS:
        one(rig, label, key, extra_ddl, turn, rate, seconds)


def one(rig: Rig, label: str, key: str, extra_ddl: str, turn: str, rate: float, seconds: float) -> None:
    # The last variant's (or step's) versions, kept by its hold, would be vacuumed in this one's base.
    rig.drop_databases()
    url = rig.fresh_db(swept=False)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sketch.DDL + extra_ddl)
    with psycopg.connect(url, autocommit=True) as conn, contextlib.suppress(psycopg.Error):
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")  # where the machine has it
    # The sketch deletes no pod: any distinct name and UID stands for one.
    pods = [(f"k{i}", str(uuid.uuid4())) for i in range(int(rate * (seconds + 30)))]
    # Two minutes unheld (a quarter of a short run), sampled every 15 s: a base of several intervals;
    # the snapshot is taken at the first sample from then on (so at most 15 s later).
    hold_after = min(120.0, seconds / 4)
    interval = 15.0
    rows: list[dict[str, float]] = []
    with ExitStack() as stack, psycopg.connect(url, autocommit=True) as probe:
        recorded = stack.enter_context(sketch.sweeper(url, turn=turn))
        holder = None
        started = time.monotonic()
        retired = stack.enter_context(host(url, rate, pods))
        last_cpu, last_wal, last_recorded = postgres_cpu_seconds(), wal_position(probe), 0
        last_statements = statement_times(probe)
        while time.monotonic() - started < seconds:
            time.sleep(interval)  # the benchmark's sampling interval
            if holder is None and time.monotonic() - started >= hold_after:
                holder = stack.enter_context(psycopg.connect(url))
                holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                holder.execute("SELECT count(*) FROM sketch_cursor").fetchone()  # takes the snapshot
            cpu, wal, done = postgres_cpu_seconds(), wal_position(probe), recorded[0]
            statements = statement_times(probe)
            n = done - last_recorded
            figures = {
                "t": round(time.monotonic() - started),
                "held": float(holder is not None),
                "done": float(n),
                "behind": float(retired[0] - done),
                "cpu_ms": 1000 * (cpu - last_cpu) / n if n else 0.0,
                "wal": (wal - last_wal) / n if n else 0.0,
            }
            spent = top_statements(last_statements, statements, n)
            last_cpu, last_wal, last_recorded, last_statements = cpu, wal, done, statements
            rows.append(figures)
            print(
                f"  held sketch ({label}) t={figures['t']:.0f}s retired={retired[0]} recorded+={n}"
                f" behind={figures['behind']:.0f} pg_cpu/row={figures['cpu_ms']:.2f}ms"
                f" wal/row={figures['wal']:.0f}B" + (" HELD" if holder is not None else ""),
                file=sys.stderr,
                flush=True,
            )
            if spent:
                print(f"    where PostgreSQL's time went: {spent}", file=sys.stderr, flush=True)
    base = [r for r in rows if not r["held"]][1:] or rows
    # The end: the median of the last three intervals, whatever each recorded (a sweeper falling behind
    # under the hold is what the figure is for; the host runs to the step's end, so none is cut short).
    base_cpu = statistics.median(r["cpu_ms"] for r in base)
    end_cpu = statistics.median(r["cpu_ms"] for r in rows[-3:])
    rig.results[f"{key}_pg_cpu_ms_per_row_base"] = round(base_cpu, 3)
    rig.results[f"{key}_pg_cpu_ms_per_row_end"] = round(end_cpu, 3)
    rig.results[f"{key}_cpu_ratio_end"] = round(end_cpu / base_cpu, 2) if base_cpu else 0.0
    rig.results[f"{key}_behind_end"] = round(rows[-1]["behind"])
