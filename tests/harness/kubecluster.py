"""A whole Kubernetes cluster for the tests and the benchmarks, on loopback: what ``kubeapiserver``
starts (etcd, kube-apiserver), plus kube-controller-manager with its default controllers, kube-scheduler,
and kwok playing the kubelets of the nodes it manages, all built by ``tools/kube/build``.

What this adds over the bare API server is everything that makes pods live: the scheduler binds them,
kwok's stages (``tools/kube/kwok/stages``: the project's own, see its README) start them and finish a
graceful deletion as a kubelet would, and the controller manager runs the namespace controller (a
deleted namespace is finalized), the service-account and token controllers, the garbage collector,
PodGC, node lifecycle (a node that stops posting its status goes NotReady and is tainted) and the
aggregation of the default ClusterRoles. Its controllers act as their own service accounts
(``--use-service-account-credentials``), so PodGC's deletes are PodGC's, as on a real cluster.

Timings are set for tests: a node's status is posted every 2 s, the controller manager calls a node
unreachable after ``node_grace`` seconds without one (default 10).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any, Self

from harness.kubeapiserver import KubeApiServer, KubeApiServerError
from harness.postgres import free_port

# The annotation kwok manages nodes by (its own convention), and the fixture's switches (README of the
# stages folder).
KWOK_NODE = ("kwok.x-k8s.io/node", "fake")
SILENT = "pod-sweeper.test/silent"
RUNTIME = "pod-sweeper.test/runtime"
COMPONENTS = ("kube-controller-manager", "kube-scheduler", "kwok")
MERGE_PATCH = "application/merge-patch+json"


def stages_dir(repo: Path | None = None) -> Path:
    """The project's kwok stages, in the checkout (the tests and the benchmarks run from one)."""
    folder = (repo or Path(__file__).resolve().parents[2]) / "tools" / "kube" / "kwok" / "stages"
    if not folder.is_dir():
        raise KubeApiServerError(f"no kwok stages at {folder}: a whole cluster runs from a checkout")
    return folder


class KubeCluster(KubeApiServer):
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on loopback."""

    def __init__(self, bindir: Path, *, extra_args: list[str] | None = None, node_grace: float = 10.0) -> None:
        super().__init__(bindir, extra_args=extra_args)
        self.node_grace = node_grace
        self.components_started_in: float | None = None

    def start(self, *, timeout: float = 120.0) -> Self:
        missing = [name for name in COMPONENTS if not (self.bindir / name).is_file()]
        if missing:
            raise KubeApiServerError(f"{self.bindir} lacks {', '.join(missing)}: run tools/kube/build again")
        super().start(timeout=timeout)
        began = time.monotonic()
        admin = str(self.admin_kubeconfig)
        self._spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={admin}", f"--authentication-kubeconfig={admin}", f"--authorization-kubeconfig={admin}",
                "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                "--leader-elect=false",
                # Each controller acts as its own service account (PodGC's deletes are PodGC's).
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.folder / 'sa.key'}",
                f"--root-ca-file={self.ca}",
                "--controllers=*",
                f"--node-monitor-grace-period={self.node_grace:g}s",
                "--node-monitor-period=1s",
            ],
        )  # fmt: skip
        self._spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={admin}", f"--authentication-kubeconfig={admin}", f"--authorization-kubeconfig={admin}",
                "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                "--leader-elect=false",
            ],
        )  # fmt: skip
        stages = sorted(str(path) for path in stages_dir().glob("*.yaml"))
        self._spawn(
            "kwok",
            [
                f"--kubeconfig={admin}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE[0]}={KWOK_NODE[1]}",
                # No Lease: a node's heartbeat is its status alone, which a silent node stops posting.
                "--node-lease-duration-seconds=0",
                "--cidr=10.64.0.0/12",  # room for thousands of pod IPs (the default gives about 254)
                f"--server-address=127.0.0.1:{free_port()}",
                *(f"--config={path}" for path in stages),
            ],
        )
        self._wait_for(
            lambda: self._default_service_account_exists() and self._aggregated_roles(),
            timeout,
            "the controller manager (the default service account, the aggregated ClusterRoles)",
        )
        self.components_started_in = time.monotonic() - began
        return self

    def _wait_for(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise KubeApiServerError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
            if time.monotonic() > deadline:
                raise KubeApiServerError(f"{what} not there after {timeout:.0f} s:\n{self.logs()}")
            time.sleep(0.2)

    def _default_service_account_exists(self) -> bool:
        return self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200

    def _aggregated_roles(self) -> bool:
        status, role = self.request("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin")
        return status == 200 and bool(role.get("rules"))

    def logs(self, lines: int = 40) -> str:
        """The end of every component's log, for a failed test."""
        return "\n".join(f"--- {name}\n{self.log_tail(name, lines)}" for name in self._procs)

    # --- nodes and pods -----------------------------------------------------------------------------

    def add_node(self, name: str | None = None, *, silent: bool = False, timeout: float = 30.0) -> str:
        """A node kwok plays the kubelet of; waits until it is Ready (a silent one never is: returns
        at once). Returns its name."""
        name = name or f"node-{uuid.uuid4().hex[:8]}"
        labels = {SILENT: "true"} if silent else {}
        body = {"metadata": {"name": name, "labels": labels, "annotations": {KWOK_NODE[0]: KWOK_NODE[1]}}}
        status, answer = self.request("POST", "/api/v1/nodes", body)
        if status != 201:
            raise KubeApiServerError(f"POST node {name}: {status} {answer}")
        if not silent:
            self._wait_for(lambda: self.node_ready(name) is True, timeout, f"node {name} Ready")
        return name

    def node_ready(self, name: str) -> bool | None:
        """The node's Ready condition: True, False, None (Unknown or no such condition yet)."""
        status, node = self.request("GET", f"/api/v1/nodes/{name}")
        if status != 200:
            return None
        for condition in (node.get("status") or {}).get("conditions") or []:
            if condition["type"] == "Ready":
                return {"True": True, "False": False}.get(condition["status"])
        return None

    def node_taints(self, name: str) -> list[str]:
        status, node = self.request("GET", f"/api/v1/nodes/{name}")
        taints = (node.get("spec") or {}).get("taints") or [] if status == 200 else []
        return [f"{t['key']}:{t['effect']}" for t in taints]

    def silence_node(self, name: str) -> None:
        """The node's kubelet stops (no more heartbeats), and so do its pods' (label them too: kwok's pod
        stages cannot see the node)."""
        patch = {"metadata": {"labels": {SILENT: "true"}}}
        status, answer = self.request("PATCH", f"/api/v1/nodes/{name}", patch, content_type=MERGE_PATCH)
        if status != 200:
            raise KubeApiServerError(f"PATCH node {name}: {status} {answer}")
        _, pods = self.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{name}")
        for pod in pods.get("items") or []:
            where = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}"
            self.request("PATCH", where, patch, content_type=MERGE_PATCH)

    def pod(
        self,
        namespace: str,
        name: str,
        *,
        node: str | None = None,
        labels: dict[str, str] | None = None,
        refuses: bool = False,
        silent: bool = False,
        finalizers: list[str] | None = None,
        grace: int = 5,
    ) -> dict[str, Any]:
        """Create a pod (bound to ``node`` when given, else left to the scheduler); returns it as created."""
        all_labels = dict(labels or {})
        if refuses:
            all_labels[RUNTIME] = "refuses"
        if silent:
            all_labels[SILENT] = "true"
        spec: dict[str, Any] = {
            "containers": [{"name": "sandbox", "image": "registry.k8s.io/pause:3.10"}],
            "terminationGracePeriodSeconds": grace,
        }
        if node:
            spec["nodeName"] = node
        metadata: dict[str, Any] = {"name": name, "labels": all_labels}
        if finalizers:
            metadata["finalizers"] = finalizers
        status, pod = self.request("POST", f"/api/v1/namespaces/{namespace}/pods", {"metadata": metadata, "spec": spec})
        if status != 201:
            raise KubeApiServerError(f"POST pod {namespace}/{name}: {status} {pod}")
        return dict(pod)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        status, pod = self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return dict(pod) if status == 200 else None

    def phase(self, namespace: str, name: str) -> str | None:
        pod = self.get_pod(namespace, name)
        return None if pod is None else str((pod.get("status") or {}).get("phase"))

    def wait_phase(self, namespace: str, name: str, phase: str, timeout: float = 30.0) -> None:
        self._wait_for(lambda: self.phase(namespace, name) == phase, timeout, f"pod {namespace}/{name} {phase}")

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"/api/v1/namespaces/{namespace}/events")[1].get("items") or [])

    def token(self, namespace: str, service_account: str, *, seconds: int = 3600) -> str:
        """A bound token for the service account from the TokenRequest API (what a kubelet mounts)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        status, answer = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token", body
        )
        if status != 201:
            raise KubeApiServerError(f"TokenRequest for {namespace}/{service_account}: {status} {json.dumps(answer)}")
        return str(answer["status"]["token"])
