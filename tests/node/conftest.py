"""The real-node tier: containerd and a kubelet on this machine (``harness.kubenode``), joined
to the whole cluster's control plane beside kwok's nodes, for what only a kubelet shows. It needs root,
Debian's containerd, runc and CNI plugins (.ci/run installs them) and the kubelet tools/kube/build
builds; skipped locally without them, failed under CI. One node at a time (two kubelets would share
the machine's cgroups), per module; each stop is checked to leave the machine as it was, and a
node killed before its stop is put back by the next (``harness.kubenode.LEDGER``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harness.kubecluster import KubeCluster
from harness.kubenode import HostState, RealNode, missing_requirements, put_back_a_killed_node


def can_run_a_node(cluster: KubeCluster) -> None:
    missing = missing_requirements()
    if not (cluster.bindir / "kubelet").is_file():
        missing.append("the kubelet (run tools/kube/build)")
    if missing:
        why = f"a real node needs {', '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    # Before the caller reads the machine's state: what a node killed in an earlier run left is not this one's.
    killed = put_back_a_killed_node()
    if killed is not None:
        print(f"\nput back what the real node run from {killed} left here when it was killed before its stop")


@pytest.fixture(scope="module")
def real_node(kube_cluster: KubeCluster) -> Iterator[RealNode]:
    """A real node for the module; at its stop, the machine as it was before it started."""
    can_run_a_node(kube_cluster)
    node = RealNode(kube_cluster)
    with node:
        info = kube_cluster.request("GET", f"/api/v1/nodes/{node.name}")[1]["status"]["nodeInfo"]
        server = kube_cluster.request("GET", "/version")[1]["gitVersion"]
        print(f"\nreal node {node.name}: kubelet {info['kubeletVersion']} (API server {server}), Ready"
              f" {node.started_in:.1f} s after containerd started")  # fmt: skip
        yield node
    assert node.before is not None
    assert node.before.differences(HostState.read()) == {}, "the real node left the machine changed"
