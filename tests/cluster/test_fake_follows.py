"""The fake held to the whole cluster where only a cluster can answer: a pod on a node whose kubelet runs
is ended after its graceful DELETE, and every call the daemon makes of it afterwards answers as the
cluster's does. (The bare API server and the fake are compared call by call in
tests/conformance/test_differential.py; there no kubelet runs, and a terminating pod stays.)"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from conformance.apiserver import answer, core_api, failure_fields, pod_fields
from harness.kubecluster import KubeCluster
from pod_sweeper.demo.fakekube import FakeKube


def ended(core: Any, namespace: str, name: str, timeout: float = 30.0) -> bool:
    """Whether the pod is gone within ``timeout`` seconds (a GET answers 404)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answer(lambda: core.read_namespaced_pod(name, namespace, _preload_content=False))[0] == 404:
            return True
        time.sleep(0.05)
    return False


def sequence(core: Any, namespace: str, uid: str, node: str) -> list[tuple[str, int, Any]]:
    """The daemon's calls on a pod its node's kubelet is running: the DELETE under its UID, the look after
    the grace, a DELETE repeated after a lost answer, a forced one; each reduced to what the daemon reads."""
    raw = {"_preload_content": False}
    uids = {uid: "uid of p"}
    fenced = {"preconditions": {"uid": uid}, "propagationPolicy": "Background"}
    seen: list[tuple[str, int, Any]] = []

    def step(what: str, call: Any) -> None:
        status, body, _ = answer(call)
        reduced = failure_fields(body) if body.get("kind") == "Status" else pod_fields(body, uids)
        if reduced.get("nodeName") == node:
            reduced["nodeName"] = "its node"
        seen.append((what, status, reduced))

    step("delete p", lambda: core.delete_namespaced_pod("p", namespace, body=fenced, **raw))
    seen.append(("the kubelet ends it", 0, ended(core, namespace, "p")))
    step("get p after its grace", lambda: core.read_namespaced_pod("p", namespace, **raw))
    step("delete p again", lambda: core.delete_namespaced_pod("p", namespace, body=fenced, **raw))
    force = {**fenced, "gracePeriodSeconds": 0}
    step("force delete p", lambda: core.delete_namespaced_pod("p", namespace, body=force, **raw))
    return seen


def test_the_fake_ends_a_running_kubelets_pod_as_the_whole_cluster_does(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    cluster = kube_cluster
    ns = cluster.namespace(f"follow-{uuid.uuid4().hex[:6]}")
    node = cluster.add_node()
    pod = cluster.pod(ns, "p", node=node, grace=5)
    cluster.wait_phase(ns, "p", "Running")
    expected = sequence(core_api(cluster.admin_kubeconfig), ns, pod["metadata"]["uid"], node)
    with FakeKube() as fake:
        fake.nodes.add("n1")
        fake.kubelets.add("n1")
        uid = fake.create_pod("conformance", "p", node_name="n1", phase="Running", grace_period=5)["metadata"]["uid"]
        got = sequence(core_api(fake.write_kubeconfig(tmp_path / "kubeconfig")), "conformance", uid, "n1")
    assert [s[0] for s in got] == [s[0] for s in expected]
    for (what, real_status, real_fields), (_, fake_status, fake_fields) in zip(expected, got, strict=True):
        assert (what, fake_status, fake_fields) == (what, real_status, real_fields)
