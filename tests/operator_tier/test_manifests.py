"""``deploy/`` as kubectl builds it: ``kubectl kustomize`` renders every manifest, and each core kind
validates strictly against the Kubernetes JSON schemas (kubernetes-validate)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate  # type: ignore[import-untyped]
import yaml  # type: ignore[import-untyped]

from operator_tier.tools import require

ROOT = Path(__file__).resolve().parents[2]
CUSTOM = {"PodMonitor", "PrometheusRule"}  # prometheus-operator's CRDs: no schema in kubernetes-validate


def test_kustomize_builds_and_every_core_kind_validates() -> None:
    kubectl = require("kubectl", "kubernetes-client")
    built = subprocess.run([kubectl, "kustomize", str(ROOT / "deploy")], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        ["ServiceAccount", "Role", "RoleBinding", "Job", "Deployment", "PodDisruptionBudget", *CUSTOM]
    )
    version = kubernetes_validate.latest_version()
    for doc in docs:
        assert doc["metadata"]["namespace"] == "sandboxes", doc["kind"]
        if doc["kind"] in CUSTOM:
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        kubernetes_validate.validate(doc, version, strict=True)  # raises with the offending field
