"""Pod Security Admission on the real API server: every pod the project ships a template for (the
chart's Deployment and migrate Job, the kustomize base's, and the sidecar component added to a host's
Deployment) is admitted in a namespace that enforces the ``restricted`` level. Enforcement applies to
pods, not to the workloads that make them, so each template is created as a pod, server-side dry run
(admission runs, nothing is stored); a pod of the same template without its security context is refused,
so the namespace is seen to enforce. The matrix runs this on every tested release (.ci/run)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from chart_render import CHART, ROOT, helm, kube_version, objects
from harness.kubeapiserver import KubeApiServer

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
HOST = {  # a host of the sidecar component's own, restricted-compliant, labelled to receive it
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "host", "labels": {"pod-sweeper.io/sidecar": "true"}},
    "spec": {
        "selector": {"matchLabels": {"app": "host"}},
        "template": {
            "metadata": {"labels": {"app": "host"}},
            "spec": {
                "containers": [
                    {
                        "name": "host",
                        "image": "registry.example.invalid/host:1",
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 20000,
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                    }
                ]
            },
        },
    },
}


def restricted_namespace(server: KubeApiServer) -> str:
    name = f"restricted-{uuid.uuid4().hex[:6]}"
    body = {"metadata": {"name": name, "labels": RESTRICTED}}
    status, answer = server.request("POST", "/api/v1/namespaces", body)
    assert status == 201, answer
    return name


def templates(server: KubeApiServer, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Every shipped pod template, by where it comes from."""
    chart = objects(helm(server.bindir, "template", "pod-sweeper", str(CHART), "-n", "sandboxes").stdout)
    kustomized = objects(server.kubectl("kustomize", str(ROOT / "deploy")))
    host = tmp_path / "host"
    host.mkdir()
    (host / "host.yaml").write_text(yaml.safe_dump(HOST))
    component = os.path.relpath(ROOT / "deploy" / "sidecar" / "component", host)
    (host / "kustomization.yaml").write_text(yaml.safe_dump({"resources": ["host.yaml"], "components": [component]}))
    [with_sidecar] = objects(server.kubectl("kustomize", str(host)))
    found = {f"chart {d['kind']}": d for d in chart if d["kind"] in ("Deployment", "Job")}
    found |= {f"kustomize {d['kind']}": d for d in kustomized if d["kind"] in ("Deployment", "Job")}
    found["the sidecar component on a host"] = with_sidecar
    assert len(found) == 5, sorted(found)
    assert [c["name"] for c in with_sidecar["spec"]["template"]["spec"]["initContainers"]] == ["pod-sweeper"]
    return {where: workload["spec"]["template"] for where, workload in found.items()}


def create_pod(server: KubeApiServer, namespace: str, template: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    # The ServiceAccount admission plugin wants the pod's account to exist (no controller manager here
    # makes `default`).
    account = {"metadata": {"name": template["spec"].get("serviceAccountName", "default")}}
    assert server.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)[0] in (201, 409)
    metadata = {**template.get("metadata", {}), "name": f"p-{uuid.uuid4().hex[:6]}"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
    return server.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod)


@pytest.fixture(scope="module")
def shipped(kube_apiserver: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return templates(kube_apiserver, tmp_path_factory.mktemp("admission"))


@pytest.mark.parametrize(
    "where",
    ["chart Deployment", "chart Job", "kustomize Deployment", "kustomize Job", "the sidecar component on a host"],
)
def test_every_shipped_pod_is_admitted_where_the_restricted_level_is_enforced(
    kube_apiserver: KubeApiServer, shipped: dict[str, dict[str, Any]], where: str
) -> None:
    namespace = restricted_namespace(kube_apiserver)
    status, answer = create_pod(kube_apiserver, namespace, shipped[where])
    assert status == 201, answer.get("message", answer)
    # The control: the same pod without its containers' security contexts is refused by this namespace.
    bare = yaml.safe_load(yaml.safe_dump(shipped[where]))
    spec = bare["spec"]
    spec.pop("securityContext", None)
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        container.pop("securityContext", None)
    status, answer = create_pod(kube_apiserver, namespace, bare)
    assert status == 403 and "violates PodSecurity" in answer["message"] and '"restricted:' in answer["message"], answer


def test_the_server_is_the_release_the_matrix_names(kube_apiserver: KubeApiServer) -> None:
    """The API server these tests ran against, as it says itself: a release of the tested matrix
    (POD_SWEEPER_KUBE_BINDIR picks one; .ci/run runs each)."""
    status, version = kube_apiserver.request("GET", "/version")
    assert status == 200, version
    minors = subprocess.run(
        [str(ROOT / "tools" / "kube" / "build"), "--matrix"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert f"v{version['major']}.{version['minor']}" in minors, (version, minors)
    assert version["gitVersion"] == kube_version(kube_apiserver.bindir)
    print(f"\nkube-apiserver {version['gitVersion']}")
