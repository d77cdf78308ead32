"""The claim's latency with ten million done rows (and another cluster's) against none."""

from __future__ import annotations

import statistics
import time
from typing import Any

import psycopg
from rig import Rig

from pod_sweeper.store import queries
from pod_sweeper.store.sweep.cursor import START


def claim_scaling(rig: Rig, done_rows: int) -> None:
    """The claim query's latency with ``done_rows`` done rows over its latency with none: two
    databases with the same 100 open rows of cluster east, measured in alternating rounds (a busy
    minute on a shared machine then weighs on both sides alike). The full one also holds another
    cluster: half the done rows are west's, and west has 1,000 open rows of its own; east's claim
    must not pay for them (migration 0009's index leads with the cluster)."""
    empty_url, full_url = rig.fresh_db(), rig.fresh_db()
    claim = queries.load("claim")
    params = {
        "batch": 100,
        "max_attempts": 10,
        "owner": "b",
        "lease_seconds": 60,
        "disarm": True,
        "cluster": "east",
        "guard": None,
        "floor": START,  # a discovery: what a claim from the start of the index costs
        "disarm_after": 0.0,
        "gathering": False,
        "transaction_rows": 500,  # the shipped breaker_transaction_rows: the claim's first look on
    }

    def claim_times(conn: psycopg.Connection[Any], n: int) -> list[float]:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            conn.execute(claim, params).fetchall()
            times.append(time.perf_counter() - started)
            conn.rollback()
        return times

    for url, done in ((empty_url, 0), (full_url, done_rows)):
        with psycopg.connect(url, autocommit=True) as conn:
            # as a claiming sweeper keeps it: the claim finds the flag clear (no update to make)
            conn.execute("INSERT INTO pod_sweeper.wakeup (cluster, armed) VALUES ('east', false)")
            conn.execute(
                "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace,"
                " pod_name, pod_uid, reason, cluster) SELECT 1, 'o' || g, g, 'ns', 'o' || g, gen_random_uuid(),"
                " 'retired', 'east' FROM generate_series(1, 100) g"
            )
            conn.execute(
                "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace,"
                " pod_name, pod_uid, reason, status, outcome, done_at, cluster) SELECT 1, 'd' || g, g, 'ns',"
                # ascending UUIDs: the unique index grows at its right edge, the seeding is quicker
                # (the claim never reads that index)
                " 'd' || g, ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'retired',"
                " 'done', 'deleted', now(), CASE WHEN g %% 2 = 0 THEN 'east' ELSE 'west' END"
                " FROM generate_series(1, %s) g",
                (done,),
            )
            if done:
                conn.execute(
                    "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace,"
                    " pod_name, pod_uid, reason, cluster) SELECT 1, 'w' || g, g, 'ns', 'w' || g,"
                    " gen_random_uuid(), 'retired', 'west' FROM generate_series(1, 1000) g"
                )
            conn.execute("VACUUM ANALYZE pod_sweeper.outbox")
    samples: dict[str, list[float]] = {"empty": [], "full": []}
    with psycopg.connect(empty_url) as e, psycopg.connect(full_url) as f:
        for _ in range(10):
            samples["empty"] += claim_times(e, 20)
            samples["full"] += claim_times(f, 20)
    empty, full = (statistics.median(samples[k]) * 1000 for k in ("empty", "full"))
    key = "claim_ratio_10m"
    rig.results.update(
        {
            key: round(full / empty, 3),
            "claim_done_rows": done_rows,
            "claim_ms_empty": round(empty, 3),
            "claim_ms_full": round(full, 3),
        }
    )
