"""What ``pod-sweeper status`` reads: the lag view, the per-status summary, why rows wait (per cluster
and reason, core.waits), the breakers, the outages and the rest, as plain data (``cli.status_text``
renders it for a terminal or as JSON). Every statement reads what it shows (the open, dead, stuck or
recent rows, each through its partial index) and never the done history: counts of done rows cover the
last hour, or are the planner's estimate and say so (tests/integration/test_history_reads.py holds
each to its plan)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pod_sweeper.core.waits import RULES, Wait
from pod_sweeper.store import queries
from pod_sweeper.store.admin import controls as admin_controls
from pod_sweeper.store.db import Connection
from pod_sweeper.store.reads import replicas, waits
from pod_sweeper.store.sweep import outbox, rates


async def breakers(conn: Connection) -> list[dict[str, Any]]:
    """Every cluster's blast-radius breaker."""
    return [dict(row) for row in await (await conn.execute(queries.load("status_breaker"))).fetchall()]


async def guards(conn: Connection, known: list[replicas.Replica]) -> list[dict[str, Any]]:
    """The replication guard of each cluster, for each set of standbys its deciding replicas name (more
    than one while a change of the guard rolls out): connected, missing, how far behind, what it holds."""
    found: list[dict[str, Any]] = []
    for cluster in sorted({r.cluster for r in known}):
        for standbys in sorted({r.guard for r in replicas.deciding(known, cluster) if r.guard}):
            lag = await outbox.guard_lag(conn, list(standbys), cluster=cluster)
            found.append({"cluster": cluster, "standbys": list(standbys), **asdict(lag)})
    return found


async def read_status(conn: Connection) -> dict[str, Any]:
    """The lag row and the summary rows, as plain data. The replicas' settings (the replication guard,
    dry run) are read from their rows (pod_sweeper.replicas), never the reader's: the same from any
    shell."""
    lag = await (await conn.execute(queries.load("status_lag"))).fetchone()
    summary = await (await conn.execute(queries.load("status_summary"))).fetchall()
    failures = await (await conn.execute(queries.load("status_failures"))).fetchall()
    stuck = await (await conn.execute(queries.load("status_stuck"))).fetchall()
    breakers = await (await conn.execute(queries.load("status_breaker"))).fetchall()
    outages = await (await conn.execute(queries.load("status_outages"))).fetchall()
    terminating = await (await conn.execute(queries.load("status_terminating"))).fetchall()
    reconcile = await (await conn.execute(queries.load("status_reconcile"))).fetchall()
    wakeup = await (await conn.execute(queries.load("status_wakeup"))).fetchall()
    rejects = await (await conn.execute(queries.load("status_rejects"))).fetchall()
    clusters = await (await conn.execute(queries.load("status_clusters"))).fetchall()
    controls = await (await conn.execute(queries.load("status_controls"))).fetchall()
    by_rate = await rates.cluster_rates(conn)
    waiting = await waits.by_cluster(conn)
    known = await replicas.known(conn)
    sweepers = await replicas.sweepers(conn)
    xmin = await rates.xmin_holders(conn)
    return {
        "waiting": [
            {**asdict(w), "ends": RULES[Wait(w.reason)].ends, "act": RULES[Wait(w.reason)].act} for w in waiting
        ],
        "large_transactions": await admin_controls.large_transactions(conn),
        "sweepers": [{**asdict(w), "unswept": w.unswept} for w in sweepers],
        "replicas": [{**asdict(r), "settings": r.settings()} for r in known],
        "disagreements": replicas.disagreements(known),
        "replication_guard": await guards(conn, known),
        "rates": [{"cluster": r.cluster, "arrival_rate": r.arrival_rate, "sweep_rate": r.sweep_rate} for r in by_rate],
        "xmin_horizon": [
            {"kind": h.kind, "holder": h.holder, "detail": h.detail, "age_xids": h.age_xids, "seconds": h.seconds}
            for h in xmin
        ],
        "controls": [dict(row) for row in controls],
        "clusters": [dict(row) for row in clusters],
        "recent_rejects": [dict(row) for row in rejects],
        "wakeup": [dict(row) for row in wakeup],
        "reconcile": [dict(row) for row in reconcile],
        "stuck_terminating": [dict(row) for row in terminating],
        "breakers": [dict(row) for row in breakers],
        "outages": [dict(row) for row in outages],
        "lag": dict(lag or {}),
        "summary": [dict(row) for row in summary],
        "recent_failures": [dict(row) for row in failures],
        "stuck_claims": [dict(row) for row in stuck],
    }
