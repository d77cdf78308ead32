"""What only a cluster with nodes shows: a node that stops posting its status goes NotReady and is
tainted, and its terminating pod is reported stuck and never forced while the Node exists; once the Node
is deleted PodGC removes the pod, and the daemon and PodGC never fight over it; a pod the host holds with
its own finalizer stays terminating, is reported stuck, and is never forced."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from harness.kubecluster import MERGE_PATCH, KubeCluster
from helpers import DaemonThread, daemon_settings, outbox, record_pod, retire, row_for, wait_until

UNREACHABLE = "node.kubernetes.io/unreachable:NoExecute"


def silent_node_with_a_running_pod(
    cluster: KubeCluster, ns: str, execs: psycopg.Connection[Any]
) -> tuple[str, dict[str, Any]]:
    """A node whose kubelet ran a pod and then went silent: NotReady, tainted, the pod left as it was."""
    node = cluster.add_node()
    pod = cluster.pod(ns, "on-silent", node=node, grace=3)
    cluster.wait_phase(ns, "on-silent", "Running")
    record_pod(execs, pod, "on-silent")
    cluster.silence_node(node)
    wait_until(lambda: cluster.node_ready(node) is None, timeout=60, what="the node to go NotReady (Unknown)")
    wait_until(lambda: UNREACHABLE in cluster.node_taints(node), timeout=30, what="the node lifecycle's taint")
    return node, pod


def test_a_silent_nodes_terminating_pod_is_reported_stuck_and_never_forced_while_the_node_exists(
    kube_cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str, fast_confirmation: None
) -> None:
    cluster = kube_cluster
    ns = cluster.namespace(f"silent-{uuid.uuid4().hex[:6]}")
    node, _ = silent_node_with_a_running_pod(cluster, ns, execs)
    settings = daemon_settings(db_url, cluster.admin_kubeconfig, stuck_terminating_seconds=4.0, force_stuck=True)
    with DaemonThread(settings) as daemon:
        retire(execs, "on-silent")
        wait_until(lambda: (r := row_for(execs, "on-silent")) and r["stuck_at"], timeout=30, what="reported stuck")
        # Looked at again and again (every second here): its Node exists, so it is never forced.
        wait_until(lambda: _looked_again(execs), timeout=10, what="looked at again")
        metrics = daemon.daemon.metrics
        assert metrics.value("pod_sweeper_stuck_terminating_total") == 1  # reported once
        assert metrics.value("pod_sweeper_force_deleted_total") == 0
        assert metrics.value("pod_sweeper_confirmed_gone_total") == 0
    pod = cluster.get_pod(ns, "on-silent")
    assert (
        pod is not None and pod["metadata"]["deletionTimestamp"] and pod["metadata"]["deletionGracePeriodSeconds"] == 3
    )
    assert cluster.node_ready(node) is None  # still there, still silent
    [row] = outbox(execs)
    assert (row["status"], row["outcome"], row["confirmed_at"]) == ("done", "deleted", None)


def _looked_again(execs: psycopg.Connection[Any]) -> bool:
    """The confirmer has looked at the stuck row at least twice more (its next look moved twice)."""
    row = execs.execute("SELECT confirm_after, stuck_at FROM pod_sweeper.outbox").fetchone()
    return bool(row and row["stuck_at"] and (row["confirm_after"] - row["stuck_at"]).total_seconds() > 1.5)


def test_when_the_node_is_deleted_podgc_removes_its_pod_and_the_daemon_never_fights_it(
    kube_cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str, fast_confirmation: None
) -> None:
    cluster = kube_cluster
    ns = cluster.namespace(f"gone-{uuid.uuid4().hex[:6]}")
    node, pod = silent_node_with_a_running_pod(cluster, ns, execs)
    settings = daemon_settings(db_url, cluster.admin_kubeconfig, stuck_terminating_seconds=4.0, events=True)
    with DaemonThread(settings) as daemon:  # POD_SWEEPER_FORCE_STUCK off: the default
        retire(execs, "on-silent")
        wait_until(lambda: (r := row_for(execs, "on-silent")) and r["stuck_at"], timeout=30, what="reported stuck")
        status, answer = cluster.request("DELETE", f"/api/v1/nodes/{node}")
        assert status == 200, answer
        # PodGC: an orphaned pod (its node gone) is removed after a 40 s quarantine, checked every 20 s.
        wait_until(lambda: cluster.get_pod(ns, "on-silent") is None, timeout=120, what="PodGC to remove the pod")
        wait_until(lambda: (r := row_for(execs, "on-silent")) and r["confirmed_at"], timeout=15, what="seen gone")
        metrics = daemon.daemon.metrics
        assert metrics.value("pod_sweeper_force_deleted_total") == 0
        assert metrics.value("pod_sweeper_outcomes_total", outcome="deleted") == 1
        wait_until(lambda: metrics.value("pod_sweeper_events_total", result="sent") == 1, what="its one Event")
    [row] = outbox(execs)
    assert (row["status"], row["outcome"], row["attempts"], row["last_error"]) == ("done", "deleted", 1, None)
    history = execs.execute("SELECT result FROM pod_sweeper.attempts WHERE outbox_id = %s", (row["id"],)).fetchall()
    assert [h["result"] for h in history] == ["deleted"]
    events = cluster.events(ns)
    assert [e["involvedObject"]["uid"] for e in events if e["reason"] == "Retired"] == [pod["metadata"]["uid"]]
    assert execs.execute("SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'dead'").fetchone()["n"] == 0


def test_a_pod_held_by_the_hosts_own_finalizer_stays_terminating_is_reported_stuck_and_never_forced(
    kube_cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str, fast_confirmation: None
) -> None:
    cluster = kube_cluster
    ns = cluster.namespace(f"held-{uuid.uuid4().hex[:6]}")
    node = cluster.add_node()
    pod = cluster.pod(ns, "held", node=node, grace=2, finalizers=["example.com/keep-for-forensics"])
    cluster.wait_phase(ns, "held", "Running")
    record_pod(execs, pod, "held")
    settings = daemon_settings(db_url, cluster.admin_kubeconfig, stuck_terminating_seconds=4.0, force_stuck=True)
    with DaemonThread(settings) as daemon:
        retire(execs, "held")
        wait_until(lambda: (r := row_for(execs, "held")) and r["stuck_at"], timeout=30, what="reported stuck")
        wait_until(lambda: _looked_again(execs), timeout=10, what="looked at again")
        assert daemon.daemon.metrics.value("pod_sweeper_force_deleted_total") == 0
        left = cluster.get_pod(ns, "held")
        assert left is not None and left["metadata"]["deletionTimestamp"]
        assert left["metadata"]["finalizers"] == ["example.com/keep-for-forensics"]
        # The host lets go of it: the kubelet finishes, and the row is confirmed.
        status, answer = cluster.request(
            "PATCH", f"/api/v1/namespaces/{ns}/pods/held", {"metadata": {"finalizers": None}}, content_type=MERGE_PATCH
        )
        assert status == 200, answer
        wait_until(lambda: cluster.get_pod(ns, "held") is None, timeout=15, what="the pod to go")
        wait_until(lambda: (r := row_for(execs, "held")) and r["confirmed_at"], timeout=15, what="confirmed")
