"""pod-sweeper's benchmarks: figures side by side with this machine's limits, as ratios.

Starts its own throwaway PostgreSQL and fake API server, runs every step (a module each under
``bench/steps/``, on the ground ``bench/rig.py`` gives them), prints a table and (with --json FILE)
writes the figures under the keys bench/README.md names. Benchmarks print numbers; they never fail.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # rig, steps/ and pgqueuer_peer.py
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))  # the harness (tests/harness)

from rig import RemoteFake, Rig
from steps import (
    busy,
    ceilings,
    cost,
    held_sketch,
    history,
    memory,
    node,
    real_api,
    scaling,
    trigger,
    waiting,
    wakeups,
    whole_cluster,
)

from harness.postgres import ThrowawayCluster, find_bindir
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import load_configuration


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/run")
    parser.add_argument("--quick", action="store_true", help="small sizes, about two minutes on 2 cores")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument(
        "--only", metavar="STEPS", help="comma-separated step names to run (e.g. 'drain,pgqueuer peer'); default all"
    )
    parser.add_argument(
        "--hours",
        type=float,
        metavar="H",
        help="how long the held snapshot and held sketch steps hold their snapshot, in hours (issue 51 asks "
        "for 2); default half an hour, 4 minutes with --quick",
    )
    args = parser.parse_args()
    quick = args.quick
    # The held snapshot step's length: the snapshot is held from its first minute (or quarter) to its end.
    pinned_seconds = 60.0 + 3600.0 * args.hours if args.hours else (240.0 if quick else 1800.0)
    # A SIGTERM (a `timeout`, a Ctrl-C'd wrapper) unwinds like an exception, so the throwaway cluster
    # and the fake server are stopped rather than left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    # pg_stat_statements, when the machine's PostgreSQL has it: the busy and held steps say which
    # statements PostgreSQL's time goes to.
    bindir = find_bindir()
    statements = (bindir.parent / "lib" / "pg_stat_statements.so").exists()
    extra = (
        {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track_planning": "on"}
        if statements
        else {}
    )
    with ThrowawayCluster(bindir=bindir, extra_settings=extra) as cluster, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = Path(tmp) / "kubeconfig"
        kube = RemoteFake(kubeconfig)  # its own process: it must not share the client's interpreter
        rig = Rig(cluster, kube, kubeconfig, quick)
        # The client loads its API classes lazily, seconds of CPU here: pay that once, before any step
        # measures a daemon from its start (an --only run would otherwise count it in its figure).
        KubeClient(load_configuration(kubeconfig, None, pool_size=1)).close()
        steps = [
            ("trigger cost", lambda: trigger.trigger_ratio(rig)),
            ("trigger cpu", lambda: trigger.trigger_cpu(rig)),
            ("client ceiling", lambda: ceilings.client_ceiling(rig, 3_000 if quick else 20_000)),
            ("SQL ceiling", lambda: ceilings.sql_ceiling(rig, 10_000 if quick else 20_000)),
            ("drain", lambda: ceilings.drain(rig, 5_000 if quick else 20_000)),
            ("pgqueuer peer", lambda: ceilings.pgqueuer_peer(rig, 2_000 if quick else 20_000)),
            ("slow API", lambda: ceilings.slow_api(rig, 2_000 if quick else 5_000)),
            ("wake latency", lambda: wakeups.wake_latency(rig, 200 if quick else 500)),
            ("real API server", lambda: real_api.real_api(rig, 1_000 if quick else 5_000, 200 if quick else 500)),
            (
                "whole cluster",
                lambda: whole_cluster.whole_cluster(
                    rig, 50 if quick else 200, 120.0, 40.0 if quick else 50.0, 1_000 if quick else 5_000
                ),
            ),
            ("real node", lambda: node.real_node(rig, 10 if quick else 50)),
            ("claim scaling", lambda: scaling.claim_scaling(rig, 1_000_000 if quick else 10_000_000)),
            ("history", lambda: history.history(rig, 1_000_000 if quick else 10_000_000)),
            ("waiting", lambda: waiting.waiting(rig, 15.0 if quick else 60.0)),
            ("memory", lambda: memory.rss(rig, 4_000 if quick else 200_000)),
            # docs/operations.md, "Sizing": 3 replicas for 100 retires a second.
            ("busy", lambda: busy.busy(rig, 100.0, 120.0 if quick else 600.0, 3)),
            ("held snapshot", lambda: busy.held(rig, 100.0, pinned_seconds, 3)),
            # issue 51: the nearest design's storage under the same held snapshot
            ("held sketch", lambda: held_sketch.held_sketch(rig, 100.0, pinned_seconds)),
            # issue 51: the host alone, then swept by 3 replicas on the shipped defaults, then idle
            ("cost", lambda: cost.cost(rig, 100.0, 30.0 if quick else 90.0, 3, 30.0 if quick else 60.0)),
        ]
        if quick and not args.only:
            # Two minutes of sustained sweeping alone would double the quick run: the whole cluster's
            # figures come with the full run, or with --only "whole cluster".
            steps = [
                (label, step)
                for label, step in steps
                if label not in ("whole cluster", "real node", "busy", "held snapshot", "held sketch", "cost")
            ]
        if args.only:
            wanted = {w.strip() for w in args.only.split(",")}
            # The ratios need their ceilings: a drain brings the client and SQL ceilings along.
            if wanted & {"drain", "pgqueuer peer"}:
                wanted |= {"client ceiling", "SQL ceiling", "drain"}
            steps = [(label, step) for label, step in steps if label in wanted]
        try:
            for label, step in steps:
                rig.drop_databases()
                t = time.monotonic()
                step()
                print(f"  {label}: {time.monotonic() - t:.1f} s", file=sys.stderr, flush=True)
        finally:
            kube.close()
    results = {
        **rig.results,
        "quick": quick,
        "seconds": round(time.monotonic() - started, 1),
        "cpus": os.cpu_count(),
        "maxrss_bench_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"{key.ljust(width)}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
