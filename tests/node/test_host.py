"""The real node itself: it joins the whole cluster, runs a pod on its bridge network with the runtime
and the kubelet doing everything a node does, and when it stops the machine is as it found it: the
kernel settings, iptables chains, cgroups, links, mounts and folders it changed while it ran."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from harness.kubecluster import KubeCluster
from harness.kubenode import BRIDGE, HostState, RealNode, RealNodeError, put_back_a_killed_node
from helpers import wait_until
from node.conftest import can_run_a_node


def test_a_node_runs_a_pod_and_leaves_the_machine_as_it_found_it(kube_cluster: KubeCluster) -> None:
    can_run_a_node(kube_cluster)
    cluster = kube_cluster
    ns = cluster.namespace(f"node-{uuid.uuid4().hex[:6]}")
    before = HostState.read()
    node = RealNode(cluster, name="real-node-host-check")
    with node:
        started = time.monotonic()
        node.pod(ns, "networked")
        cluster.wait_phase(ns, "networked", "Running", timeout=60)
        first_pod = time.monotonic() - started
        pod = cluster.get_pod(ns, "networked")
        assert pod is not None and pod["status"]["podIP"].startswith("10.245.0.")  # the bridge's network
        during = HostState.read()
        changed = before.differences(during)
        # It did change the machine (so the comparison below can fail): its bridge, at least.
        assert BRIDGE in changed["links"], changed
        print(f"\nnode Ready {node.started_in:.1f} s after containerd started; a pod Running {first_pod:.1f} s after")
        print(f"while it ran, the machine differed in: {sorted(changed)}")
        cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/networked")
        wait_until(lambda: cluster.get_pod(ns, "networked") is None, timeout=30, what="the kubelet's end of it")
    assert before.differences(HostState.read()) == {}
    status, _ = cluster.request("GET", f"/api/v1/nodes/{node.name}")
    assert status == 404  # the node object is gone with it


def test_a_node_killed_before_its_stop_is_put_back_by_the_next(kube_cluster: KubeCluster) -> None:
    """A test run killed while its node ran (a SIGKILL, a machine's session ending under it) must not
    leave the next run a bridge it refuses to start beside: the next node puts back what the killed one's
    ledger says, and ends the containerd, kubelet and pod containers it left running."""
    can_run_a_node(kube_cluster)
    ns = kube_cluster.namespace(f"killed-{uuid.uuid4().hex[:6]}")
    before = HostState.read()
    node = RealNode(kube_cluster, name="real-node-killed")
    with node:
        node.pod(ns, "left-running")  # its sandbox and container outlive containerd and the shims
        kube_cluster.wait_phase(ns, "left-running", "Running", timeout=60)
        second = RealNode(kube_cluster, name="real-node-beside")
        with pytest.raises(RealNodeError, match="another real node runs on this machine"):
            second.start()  # while the first runs, the lock says so, and nothing of the first is touched
        second.folder.rmdir()
        assert BRIDGE in before.differences(HostState.read())["links"]
        node.abandon()
        left_running = [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(node.folder).encode() in _read(p)]
        assert left_running, "the killed node's containerd and kubelet run on, as after a SIGKILL"
        assert put_back_a_killed_node() == node.folder
        assert before.differences(HostState.read()) == {}
        assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(node.folder).encode() in _read(p)]
        assert not node.folder.exists()
        assert put_back_a_killed_node() is None  # once
        node.before = None  # its stop at the end of `with` has nothing left to put back, only the API's objects
    kube_cluster.request("DELETE", f"/api/v1/namespaces/{ns}/pods/left-running", {"gracePeriodSeconds": 0})


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended meanwhile
        return b""
