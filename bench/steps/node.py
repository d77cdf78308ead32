"""On a real node (containerd and a kubelet): its start-up, and retire-to-gone of pods the runtime
refuses and of running pods."""

from __future__ import annotations

import sys
import time

from rig import NS, Rig

from harness.kubeapiserver import KubeApiServerError
from harness.kubeapiserver import find_bindir as find_kube_bindir
from harness.kubecluster import KubeCluster
from harness.kubenode import RealNode, missing_requirements


def real_node(rig: Rig, latencies: int) -> None:
    """On a real node (containerd and a kubelet, ``harness.kubenode``) joined to the whole
    cluster: its start-up (containerd started to node Ready), and retire-to-gone of Pending pods whose
    sandbox the runtime refuses (a RuntimeClass without a handler) and of Running pods (grace 1 s),
    from the commit to the pod's DELETED event: the real kubelet's end of each pod included."""
    try:
        bindir = find_kube_bindir()
    except KubeApiServerError as exc:
        print(f"  no real-node figures: {exc}", file=sys.stderr)
        return
    missing = missing_requirements() + ([] if (bindir / "kubelet").is_file() else ["tools/kube/build's kubelet"])
    if missing:
        print(f"  no real-node figures: a real node needs {', '.join(missing)}", file=sys.stderr)
        return
    with KubeCluster(bindir) as cluster, RealNode(cluster) as node:
        assert node.started_in is not None
        cluster.namespace(NS)
        refused = node.refusing_runtime_class()
        for kind, runtime_class in (("pending", refused), ("running", None)):
            pods = [node.pod(NS, f"node-{kind}-{i}", runtime_class=runtime_class, grace=1) for i in range(latencies)]
            deadline = time.monotonic() + 120
            for pod in pods:
                name = pod["metadata"]["name"]
                while not (node.refusals(NS, name) if runtime_class else cluster.phase(NS, name) == "Running"):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"pod {name} never reached where the step wants it")
                    time.sleep(0.1)
            rig.retire_to_gone(cluster, pods, f"node_{kind}_gone", kubeconfig=cluster.admin_kubeconfig)
        rss = node.rss_bytes()
        rig.results.update(
            node_ready_s=round(node.started_in, 2),
            node_kubelet_rss_mb=round(rss.get("kubelet", 0) / 2**20),
            node_containerd_rss_mb=round(rss.get("containerd", 0) / 2**20),
        )
