"""The seed's own evidence, on a whole cluster. A stranded create (a pod scheduled onto a node whose
runtime never starts it) is retired by a writer that never touches the pod: with no sweeper for a window
while PodGC runs (and removes what it is meant to), the pod is still Pending at its end; with the daemon
on, it is gone, and a second one goes within seconds of its retire's commit. A Running pod retired the
same way ends within its grace period, recorded once, confirmed, with one Event."""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg

from harness.kubecluster import KubeCluster
from helpers import DaemonThread, daemon_settings, outbox, record_pod, retire, row_for, wait_until

# The seed's control window: two stranded creates kept their Pending pods for the whole 60 s with the GC
# loop off. PodGC checks every 20 s and removes an orphaned pod after a 40 s quarantine, so the window
# holds at least one of its removals (the orphan below proves it ran).
CONTROL_WINDOW_SECONDS = 60.0


def created(cluster: KubeCluster, namespace: str, name: str) -> bool:
    """Scheduled, and its (emulated) kubelet has given it an IP: the create has happened on the node."""
    pod = cluster.get_pod(namespace, name)
    return bool(pod and (pod.get("status") or {}).get("podIP"))


def test_a_stranded_create_stays_pending_beside_podgc_and_the_daemon_deletes_it(
    kube_cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str
) -> None:
    cluster = kube_cluster
    ns = cluster.namespace(f"seed-{uuid.uuid4().hex[:6]}")
    cluster.add_node()
    stranded = cluster.pod(ns, "stranded", refuses=True)  # the scheduler binds it; its runtime refuses it
    wait_until(lambda: created(cluster, ns, "stranded"), timeout=30, what="the stranded pod scheduled")
    record_pod(execs, stranded, "stranded")
    retire(execs, "stranded")  # a writer that never touches the pod

    # The control: no sweeper for the window, while PodGC runs.
    window_start = time.monotonic()
    cluster.pod(ns, "orphan", node=f"gone-{uuid.uuid4().hex[:6]}")  # bound to a node that does not exist
    wait_until(lambda: cluster.get_pod(ns, "orphan") is None, timeout=120, what="PodGC to remove the orphan")
    wait_until(lambda: time.monotonic() - window_start >= CONTROL_WINDOW_SECONDS, timeout=120, what="the window")
    pod = cluster.get_pod(ns, "stranded")
    assert pod is not None and pod["status"]["phase"] == "Pending" and not pod["metadata"].get("deletionTimestamp")
    [container] = pod["status"]["containerStatuses"]
    assert container["state"]["waiting"]["reason"] == "ContainerCreating"
    print(f"control: PodGC removed the orphan; the stranded pod is still Pending after {CONTROL_WINDOW_SECONDS:.0f} s")

    # The daemon on.
    settings = daemon_settings(db_url, cluster.admin_kubeconfig, events=True, poll_interval=5.0)
    with DaemonThread(settings):
        started = time.monotonic()
        wait_until(lambda: cluster.get_pod(ns, "stranded") is None, timeout=30, what="the stranded pod gone")
        catch_up = time.monotonic() - started
        second = cluster.pod(ns, "stranded-2", refuses=True)
        wait_until(lambda: created(cluster, ns, "stranded-2"), timeout=30, what="the second stranded pod scheduled")
        record_pod(execs, second, "stranded-2")
        committed = time.monotonic()
        retire(execs, "stranded-2")  # autocommit: committed when this returns
        wait_until(lambda: cluster.get_pod(ns, "stranded-2") is None, timeout=30, interval=0.02, what="it gone")
        gone = time.monotonic() - committed
    print(f"daemon on: the first stranded pod gone {catch_up:.2f} s after the daemon started; the second {gone:.2f} s")
    print("after its retire committed (the seed measured 45.6 s into its phase)")
    assert gone < 10.0
    for sid in ("stranded", "stranded-2"):
        row = row_for(execs, sid)
        assert row is not None and (row["status"], row["outcome"], row["attempts"]) == ("done", "deleted", 1)


def test_a_running_pod_retired_ends_within_its_grace_recorded_once_and_confirmed(
    kube_cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str, fast_confirmation: None
) -> None:
    cluster = kube_cluster
    ns = cluster.namespace(f"run-{uuid.uuid4().hex[:6]}")
    cluster.add_node()
    pod = cluster.pod(ns, "running", grace=3)
    cluster.wait_phase(ns, "running", "Running")
    record_pod(execs, pod, "running")
    settings = daemon_settings(db_url, cluster.admin_kubeconfig, events=True, stuck_terminating_seconds=30.0)
    with DaemonThread(settings) as daemon:
        retire(execs, "running")
        row = wait_until(lambda: (r := row_for(execs, "running")) and r["status"] == "done" and r, what="done")
        assert row["confirm_after"] is not None  # left terminating: its grace, then a look
        terminating = cluster.get_pod(ns, "running")
        wait_until(lambda: cluster.get_pod(ns, "running") is None, timeout=10, what="the kubelet's end of it")
        wait_until(lambda: (r := row_for(execs, "running")) and r["confirmed_at"], timeout=15, what="confirmed")
        metrics = daemon.daemon.metrics
        wait_until(lambda: metrics.value("pod_sweeper_events_total", result="sent") >= 1, what="its Event")
        assert metrics.value("pod_sweeper_stuck_terminating_total") == 0
        assert metrics.value("pod_sweeper_outcomes_total", outcome="deleted") == 1
    assert terminating is None or terminating["metadata"]["deletionGracePeriodSeconds"] == 3
    [row] = outbox(execs)
    assert (row["outcome"], row["attempts"], row["last_http_status"], row["stuck_at"]) == ("deleted", 1, 200, None)
    history = execs.execute("SELECT result FROM pod_sweeper.attempts WHERE outbox_id = %s", (row["id"],)).fetchall()
    assert [h["result"] for h in history] == ["deleted"]  # recorded once, one request
    retired = [e for e in cluster.events(ns) if e["reason"] == "Retired"]
    assert [e["involvedObject"]["uid"] for e in retired] == [pod["metadata"]["uid"]]  # one Event, no twin
