"""What only a kubelet shows, on the real node: the seed's stranded create (a sandbox the runtime can
never create, here a RuntimeClass whose handler containerd does not have: the kubelet retries, the pod
stays Pending with FailedCreatePodSandBox, as the seed's refused generation did, through a pass of
PodGC that removes what it should) deleted after its retire, timed from the retire's commit to the pod
gone; and graceful deletion by a kubelet: a container that takes its time at SIGTERM ends within its
grace, one that ignores SIGTERM is killed at the grace's end, and each row is deleted once and
confirmed."""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg

from harness.kubecluster import KubeCluster
from harness.kubenode import RealNode
from helpers import DaemonThread, daemon_settings, record_pod, retire, row_for, wait_until


def test_a_sandbox_the_runtime_cannot_create_stays_pending_and_goes_after_its_retire(
    real_node: RealNode, kube_cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str
) -> None:
    cluster = kube_cluster
    ns = cluster.namespace(f"stranded-{uuid.uuid4().hex[:6]}")
    refused = real_node.refusing_runtime_class()
    pod = real_node.pod(ns, "stranded", runtime_class=refused)
    # The kubelet asks the runtime again and again; each time it refuses.
    wait_until(
        lambda: real_node.refusals(ns, "stranded") >= 2, timeout=90, interval=0.5,
        what="the kubelet's second refused sandbox",
    )  # fmt: skip
    [event] = real_node.refusal_events(ns, "stranded")
    assert refused in event["message"], event["message"]
    stranded = cluster.get_pod(ns, "stranded")
    assert stranded is not None and stranded["status"]["phase"] == "Pending"
    assert not stranded["metadata"].get("deletionTimestamp")
    [container] = stranded["status"]["containerStatuses"]
    assert container["state"]["waiting"]["reason"] == "ContainerCreating"
    print(f"\n{event['message']} (x{event.get('count') or 1}); still Pending")
    # Beside PodGC: it removes what it is meant to (a pod bound to a node that does not exist, after its
    # quarantine) and leaves the stranded pod alone; the kubelet goes on asking the runtime.
    cluster.pod(ns, "orphan", node=f"gone-{uuid.uuid4().hex[:6]}")
    window = time.monotonic()
    wait_until(lambda: cluster.get_pod(ns, "orphan") is None, timeout=150, interval=0.5, what="PodGC's removal")
    stranded = cluster.get_pod(ns, "stranded")
    assert stranded is not None and stranded["status"]["phase"] == "Pending"
    assert not stranded["metadata"].get("deletionTimestamp")
    print(f"PodGC removed the orphan after {time.monotonic() - window:.0f} s; the stranded pod is still Pending,")
    print(f"refused {real_node.refusals(ns, 'stranded')} times by now")

    record_pod(execs, pod, "stranded")
    settings = daemon_settings(db_url, cluster.admin_kubeconfig, events=True)
    with DaemonThread(settings):
        committed = time.monotonic()
        retire(execs, "stranded")  # autocommit: committed when this returns
        wait_until(lambda: cluster.get_pod(ns, "stranded") is None, timeout=30, interval=0.02, what="it gone")
        gone = time.monotonic() - committed
    print(f"the stranded pod gone {gone:.2f} s after its retire committed (the kubelet finished it)")
    row = row_for(execs, "stranded")
    assert row is not None and (row["status"], row["outcome"], row["attempts"]) == ("done", "deleted", 1)


def ended_within_grace(
    node: RealNode, cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str, *, args: list[str], grace: int
) -> tuple[float, str]:
    """A Running pause container with ``args`` retired under the daemon: the seconds from its DELETE to
    the pod gone, and what the container logged; asserts the row deleted once and confirmed."""
    ns = cluster.namespace(f"graceful-{uuid.uuid4().hex[:6]}")
    pod = node.pod(ns, "worker", args=args, grace=grace)
    cluster.wait_phase(ns, "worker", "Running", timeout=60)
    record_pod(execs, pod, ns)
    log = ""
    settings = daemon_settings(db_url, cluster.admin_kubeconfig, events=True, stuck_terminating_seconds=60.0)
    with DaemonThread(settings) as daemon:
        retire(execs, ns)
        row = wait_until(lambda: (r := row_for(execs, ns)) and r["status"] == "done" and r, timeout=30, what="done")
        deleted = time.monotonic()
        assert row["outcome"] == "deleted" and row["confirm_after"] is not None
        terminating = cluster.get_pod(ns, "worker")
        assert terminating is not None and terminating["metadata"]["deletionGracePeriodSeconds"] == grace

        def logged_sigterm() -> bool:
            nonlocal log
            log = node.container_log(pod) or log
            return "terminated" in log

        wait_until(logged_sigterm, timeout=grace + 5, what="the container's SIGTERM in its log")
        wait_until(lambda: cluster.get_pod(ns, "worker") is None, timeout=grace + 30, interval=0.05, what="it gone")
        ended = time.monotonic() - deleted
        wait_until(lambda: (r := row_for(execs, ns)) and r["confirmed_at"], timeout=30, what="its confirmation")
        metrics = daemon.daemon.metrics
        assert metrics.value("pod_sweeper_outcomes_total", outcome="deleted") == 1
        assert metrics.value("pod_sweeper_stuck_terminating_total") == 0
    history = execs.execute("SELECT result FROM pod_sweeper.attempts WHERE outbox_id = %s", (row["id"],)).fetchall()
    assert [h["result"] for h in history] == ["deleted"]  # one DELETE, recorded once
    return ended, log


def test_a_container_that_takes_its_time_at_sigterm_ends_within_its_grace(
    real_node: RealNode, kube_cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str,
    fast_confirmation: None,
) -> None:  # fmt: skip
    ended, log = ended_within_grace(real_node, kube_cluster, execs, db_url, args=["-term-delay", "3s"], grace=10)
    print(f"\ntook 3 s at SIGTERM, grace 10 s: gone {ended:.1f} s after its DELETE; its log: {log.strip()!r}")
    assert "stopping on terminated in 3s" in log
    assert 3.0 <= ended < 10.0  # its own 3 s, not the grace: it exited, nothing was killed


def test_a_container_that_ignores_sigterm_is_killed_at_its_graces_end(
    real_node: RealNode, kube_cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str,
    fast_confirmation: None,
) -> None:  # fmt: skip
    ended, log = ended_within_grace(real_node, kube_cluster, execs, db_url, args=["-ignore-term"], grace=4)
    print(f"\nignores SIGTERM, grace 4 s: gone {ended:.1f} s after its DELETE; its log: {log.strip()!r}")
    assert "ignoring terminated" in log and "stopped" not in log
    assert 4.0 <= ended < 4.0 + 6.0  # SIGKILL at the grace's end, then the kubelet's clean-up
