"""Running the Helm that ``tools/kube/build`` builds, for the chart's tests in the realkube and cluster
tiers: its caches and configuration in a temporary folder (never the user's), its output returned."""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "chart"
# What Helm adds to every object for its own bookkeeping (and the selector's instance label, which
# lets two releases share a namespace); the kustomize base has none of them. Nothing else may differ.
HELM_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)
_HOME = tempfile.mkdtemp(prefix="pod-sweeper-helm-")


# The Helms the chart is tested with, as tools/kube/build names them: Helm 4 and the newest Helm 3.
HELMS = ("helm", "helm3")


def helm(
    bindir: Path,
    *args: str,
    binary: str = "helm",
    kubeconfig: Path | None = None,
    check: bool = True,
    timeout: float = 300,
) -> Any:
    """``helm *args`` (a CompletedProcess), run by ``binary`` (one of HELMS); with ``check``, a failure
    raises with Helm's own lines. ``template`` renders for the release of the API server beside it, as
    a user rendering offline must say (Helm 3 assumes Kubernetes v1.20 otherwise, below the chart's
    kubeVersion)."""
    helm_binary = bindir / binary
    assert helm_binary.is_file(), f"{bindir} has no {binary}: run tools/kube/build"
    if args[:1] == ("template",) and "--kube-version" not in args:
        args = (*args, "--kube-version", kube_version(bindir))
    env = {
        **os.environ,
        "HELM_CACHE_HOME": f"{_HOME}/cache",
        "HELM_CONFIG_HOME": f"{_HOME}/config",
        "HELM_DATA_HOME": f"{_HOME}/data",
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run(
        [str(helm_binary), *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{binary} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    if check:  # no noise line on a command that works (Helm's level= lines: a symbolic link followed, ...)
        assert "level=" not in done.stderr, f"{binary} {' '.join(args)} said:\n{done.stderr}"
    return done


@functools.cache
def kube_version(bindir: Path) -> str:
    """The release of the kube-apiserver in ``bindir`` (``v1.36.3``)."""
    said = subprocess.run([str(bindir / "kube-apiserver"), "--version"], capture_output=True, text=True, check=True)
    return said.stdout.split()[-1]


def objects(rendered: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def without_helm_labels(obj: Any) -> Any:
    """``obj`` with Helm's bookkeeping labels removed wherever labels or selectors are."""
    if isinstance(obj, dict):
        return {k: without_helm_labels(v) for k, v in obj.items() if k not in HELM_LABELS}
    if isinstance(obj, list):
        return [without_helm_labels(v) for v in obj]
    return obj


def by_identity(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}
