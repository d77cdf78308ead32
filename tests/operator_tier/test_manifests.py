"""``deploy/`` as kubectl builds it: ``kubectl kustomize`` renders every manifest, and each core kind
validates strictly against the Kubernetes JSON schemas (kubernetes-validate)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import yaml

from operator_tier.tools import require

ROOT = Path(__file__).resolve().parents[2]
CUSTOM = {"PodMonitor", "PrometheusRule"}  # prometheus-operator's CRDs (deploy/monitoring): no schema here


def kustomize(folder: Path) -> list[dict[str, Any]]:
    kubectl = require("kubectl", "kubernetes-client")
    built = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    return [d for d in yaml.safe_load_all(built.stdout) if d]


def test_kustomize_builds_and_every_core_kind_validates() -> None:
    """deploy/ holds core kinds only (it applies to a plain cluster); deploy/monitoring holds the
    prometheus-operator kinds."""
    docs = kustomize(ROOT / "deploy")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["ServiceAccount", "Role", "RoleBinding", "Job", "Deployment", "PodDisruptionBudget"])
    version = kubernetes_validate.latest_version()
    for doc in docs:
        assert doc["metadata"]["namespace"] == "sandboxes", doc["kind"]
        kubernetes_validate.validate(doc, version, strict=True)  # raises with the offending field
    monitoring = kustomize(ROOT / "deploy" / "monitoring")
    assert sorted(d["kind"] for d in monitoring) == sorted(CUSTOM)
    for doc in monitoring:
        assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["metadata"]["namespace"] == "sandboxes"


def sidecar_example() -> list[dict[str, Any]]:
    return kustomize(ROOT / "deploy" / "sidecar" / "example")


def test_the_sidecar_component_adds_a_native_sidecar_that_cannot_fail_its_pod() -> None:
    docs = sidecar_example()
    version = kubernetes_validate.latest_version()
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)
    [host] = [d for d in docs if d["kind"] == "Deployment"]
    spec = host["spec"]["template"]["spec"]
    [sidecar] = spec["initContainers"]
    assert sidecar["name"] == "pod-sweeper" and sidecar["restartPolicy"] == "Always"
    assert "readinessProbe" not in sidecar  # a native sidecar's readiness would be its pod's
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/livez"  # never /readyz: the host starts anyway
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/livez"
    [main] = spec["containers"]
    assert main["name"] == "control-plane" and main["readinessProbe"]  # the host's own, untouched
    env = {e["name"]: e for e in sidecar["env"]}
    # Its own namespace, from the downward API: kustomize's `namespace:` moves it along.
    assert env["POD_SWEEPER_NAMESPACES"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["POD_SWEEPER_ON_START_ERROR"]["value"] == "wait"  # a start-up error never blocks the host
    [binding] = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["subjects"][0]["name"] == spec["serviceAccountName"]
    # The Deployment form keeps its readiness probe: there the sweeper is a pod of its own.
    deployment = yaml.safe_load((ROOT / "deploy" / "deployment.yaml").read_text())
    assert deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_lines_a_hosts_chart_adds_are_the_components_sidecar() -> None:
    """docs/operations.md shows the container a host's own Helm chart adds: the component's, but for
    the image (a value of the host's chart)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("**The sidecar in a host's own chart.**") :]
    block = section[section.index("```yaml\n") + len("```yaml\n") : section.index("\n```", section.index("```yaml"))]
    [documented] = yaml.safe_load(block)["initContainers"]
    patch = yaml.safe_load((ROOT / "deploy" / "sidecar" / "component" / "sidecar.yaml").read_text())
    [component] = patch["spec"]["template"]["spec"]["initContainers"]
    assert documented["image"] == "{{ .Values.podSweeper.image }}"
    assert {**documented, "image": component["image"]} == component
