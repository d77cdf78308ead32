"""A busy platform on the shipped defaults, and the same with a snapshot held open: figures over time.

``busy``: live pods, a host retiring ``rate`` executions a second one a transaction, the replica count
docs/operations.md prescribes ("Sizing"), and every setting but the database and the kubeconfig at its
default (the breaker and the rate limit among them). ``held``: the same stream, then one REPEATABLE
READ transaction left open, as a report or an idle-in-transaction client does. Each prints a line every
interval: rows retired and done, the backlog, the breaker, retire-to-done p50/p99 of the rows done in
the interval, PostgreSQL's CPU per row done, and the outbox's dead tuples.
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
from rig import DaemonThread, Rig

from pod_sweeper.core.settings import Settings

# The shipped breaker and rate limit: the benchmark must run what users run.
SHIPPED = {
    name: Settings.model_fields[name].default
    for name in (
        "max_deletes_per_minute",
        "breaker_surge_factor",
        "breaker_surge_floor",
        "breaker_transaction_rows",
        "rate_limit_qps",
        "poll_interval",
    )
}


def postgres_cpu_seconds() -> float:
    """User and system CPU of the machine's PostgreSQL (the bench's throwaway cluster): its postmasters'
    own and their reaped children's, plus every live backend's (a backend that exits takes its own time
    with it, into its postmaster's children's time)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                head, rest = f.read().rsplit(")", 1)
            if not (head.endswith("(postgres") or head.endswith("(postmaster")):
                continue
            values = rest.split()
            total += int(values[11]) + int(values[12])  # utime, stime
            if values[1] == "1" or head.endswith("(postmaster"):  # no postgres parent: the postmaster
                total += int(values[13]) + int(values[14])  # cutime, cstime
            else:
                with open(f"/proc/{values[1]}/stat") as f:
                    parent = f.read().rsplit(")", 1)[0]
                if not parent.endswith("(postgres"):
                    total += int(values[13]) + int(values[14])
        except (OSError, IndexError, ValueError):
            continue
    return total / tick


@contextmanager
def writer(url: str, rate: float, total: int) -> Iterator[list[int]]:
    """A host retiring sandboxes s0..s<total-1> one a transaction, ``rate`` a second; yields [retired]."""
    retired = [0]
    stop = threading.Event()

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            start = time.monotonic()
            for i in range(total):
                if stop.is_set():
                    return
                time.sleep(max(0.0, start + i / rate - time.monotonic()))  # pacing the host
                conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (f"s{i}",))
                retired[0] = i + 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield retired
    finally:
        stop.set()
        thread.join(30)


def sample(conn: psycopg.Connection[Any], since: float) -> dict[str, Any]:
    """The rows done since ``since`` (epoch seconds): count and retire-to-done latencies; the backlog,
    the breaker and the outbox's dead tuples."""
    lat = [
        r[0]
        for r in conn.execute(
            "SELECT extract(epoch FROM done_at - enqueued_at) * 1000 FROM pod_sweeper.outbox"
            " WHERE status = 'done' AND done_at > to_timestamp(%s)",
            (since,),
        ).fetchall()
    ]
    lat.sort()
    open_rows = conn.execute(
        "SELECT count(*) FROM pod_sweeper.outbox WHERE status IN ('pending', 'claimed')"
    ).fetchone()
    tripped = conn.execute("SELECT reason FROM pod_sweeper.breaker WHERE tripped_at IS NOT NULL").fetchone()
    dead = conn.execute(
        "SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = 'pod_sweeper' AND relname = 'outbox'"
    ).fetchone()
    return {
        "done": len(lat),
        "p50": statistics.median(lat) if lat else 0.0,
        "p99": lat[max(0, int(len(lat) * 0.99) - 1)] if lat else 0.0,
        "open": open_rows[0] if open_rows else 0,
        "tripped": tripped[0] if tripped else None,
        "dead_tuples": dead[0] if dead else 0,
    }


def wal_position(conn: psycopg.Connection[Any]) -> int:
    """The WAL written so far, in bytes."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0]) if row else 0


def statement_times(conn: psycopg.Connection[Any]) -> dict[str, tuple[float, int]]:
    """Each statement's total execution time (ms) and calls so far, by its first line, when
    pg_stat_statements is loaded (bench/suite.py loads it where the machine has it); else nothing."""
    try:
        rows = conn.execute(
            "SELECT query, total_exec_time, calls FROM pg_stat_statements WHERE dbid ="
            " (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    except psycopg.Error:
        return {}
    times: dict[str, tuple[float, int]] = {}
    for query, total, calls in rows:
        # The daemon's statements open with a comment naming what they do: the first line names them.
        name = query.strip().splitlines()[0][:70]
        before = times.get(name, (0.0, 0))
        times[name] = (before[0] + total, before[1] + calls)
    return times


def top_statements(before: dict[str, tuple[float, int]], after: dict[str, tuple[float, int]], done: int) -> str:
    """The four statements PostgreSQL spent most time on between two samples, in ms per row done."""
    spent = sorted(
        ((after[k][0] - before.get(k, (0.0, 0))[0], after[k][1] - before.get(k, (0.0, 0))[1], k) for k in after),
        reverse=True,
    )[:4]
    return "; ".join(f"{ms / max(done, 1):.2f}ms/row x{calls} {name!r}" for ms, calls, name in spent if ms > 0)


def stream(rig: Rig, key: str, rate: float, seconds: float, replicas: int, *, hold_after: float | None) -> None:
    """``rate`` retires a second for ``seconds`` with live pods and ``replicas`` replicas at the
    shipped defaults; with ``hold_after``, a snapshot is held open from that second on."""
    url = rig.fresh_db()
    total = int(rate * seconds)
    rig.backlog(url, total, retire=False)
    settings = rig.settings(url, **SHIPPED)
    interval = 30.0 if seconds >= 300 else 15.0
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack, psycopg.connect(url, autocommit=True) as probe:
        with contextlib.suppress(psycopg.Error):
            probe.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        last_statements = statement_times(probe)
        for i in range(replicas):
            stack.enter_context(DaemonThread(settings.model_copy(update={"replica_id": f"busy-{i}"}))).ready()
        holder = None
        started = time.monotonic()
        retired = stack.enter_context(writer(url, rate, total))
        last_wall, last_cpu, last_wal = time.time(), postgres_cpu_seconds(), wal_position(probe)
        while (elapsed := time.monotonic() - started) < seconds:
            time.sleep(interval)  # the benchmark's sampling interval
            if hold_after is not None and holder is None and elapsed >= hold_after:
                holder = stack.enter_context(psycopg.connect(url))
                holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                holder.execute("SELECT count(*) FROM pod_sweeper.breaker").fetchone()  # takes the snapshot
            cpu, wal = postgres_cpu_seconds(), wal_position(probe)
            figures = sample(probe, last_wall)
            figures["t"] = round(time.monotonic() - started)
            figures["retired"] = retired[0]
            figures["held"] = holder is not None
            figures["pg_cpu_ms_per_row"] = 1000 * (cpu - last_cpu) / figures["done"] if figures["done"] else 0.0
            figures["wal_per_row"] = (wal - last_wal) / figures["done"] if figures["done"] else 0.0
            statements = statement_times(probe)
            spent = top_statements(last_statements, statements, figures["done"])
            last_wall, last_cpu, last_wal, last_statements = time.time(), cpu, wal, statements
            rows.append(figures)
            print(
                f"  {key} t={figures['t']}s retired={figures['retired']} done+={figures['done']} "
                f"open={figures['open']} p50={figures['p50']:.0f}ms p99={figures['p99']:.0f}ms "
                f"pg_cpu/row={figures['pg_cpu_ms_per_row']:.2f}ms wal/row={figures['wal_per_row']:.0f}B "
                f"dead_tuples={figures['dead_tuples']}"
                + (" HELD" if figures["held"] else "")
                + (f" TRIPPED: {figures['tripped']}" if figures["tripped"] else ""),
                file=sys.stderr,
                flush=True,
            )
            if spent:
                print(f"    where PostgreSQL's time went: {spent}", file=sys.stderr, flush=True)
    base = [r for r in rows if not r["held"]][1:] or rows
    last = rows[-1]
    # The end's CPU per row from the last whole interval: the last one is cut short by the writer's end,
    # and PostgreSQL's own work (vacuum, checkpoints) over fewer rows would inflate it.
    whole = [r for r in rows if r["done"] >= 0.9 * rate * interval] or rows
    rig.results[f"{key}_trips"] = sum(1 for r in rows if r["tripped"])
    rig.results[f"{key}_open_rows_end"] = last["open"]
    rig.results[f"{key}_p99_ms_worst"] = round(max(r["p99"] for r in rows))
    rig.results[f"{key}_pg_cpu_ms_per_row_base"] = round(statistics.median(r["pg_cpu_ms_per_row"] for r in base), 2)
    rig.results[f"{key}_pg_cpu_ms_per_row_end"] = round(whole[-1]["pg_cpu_ms_per_row"], 2)
    # WAL a retire costs, the host's UPDATE and its enqueue included (docs/dba.md, "History").
    rig.results[f"{key}_wal_bytes_per_row"] = round(statistics.median(r["wal_per_row"] for r in base))


def busy(rig: Rig, rate: float, seconds: float, replicas: int) -> None:
    stream(rig, "busy", rate, seconds, replicas, hold_after=None)


def held(rig: Rig, rate: float, seconds: float, replicas: int) -> None:
    stream(rig, "held", rate, seconds, replicas, hold_after=min(60.0, seconds / 4))
