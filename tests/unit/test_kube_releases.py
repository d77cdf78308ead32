"""The Kubernetes releases the project promises are the ones it tests: the matrix tools/kube/build
prints (the main release and each of tools/kube/releases/), the chart's kubeVersion (its oldest), the
line of docs/operations.md that names them, and the releases each wrapper module builds."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tools" / "kube" / "build"


def matrix() -> list[str]:
    done = subprocess.run([str(BUILD), "--matrix"], capture_output=True, text=True, check=True)
    return done.stdout.split()


def required(go_mod: Path) -> str:
    [version] = re.findall(r"^\s*k8s\.io/kubernetes (v1\.\d+\.\d+)", go_mod.read_text(), flags=re.M)
    return version


def test_the_matrix_is_consecutive_minors_each_built_from_its_own_release() -> None:
    minors = matrix()
    numbers = [int(m.removeprefix("v1.")) for m in minors]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), minors  # no minor skipped
    assert len(minors) >= 4, minors
    main = subprocess.run([str(BUILD), "--main"], capture_output=True, text=True, check=True).stdout.strip()
    assert main in minors and required(ROOT / "tools" / "kube" / "apiserver" / "go.mod").startswith(main + ".")
    for minor in minors:
        if minor != main:
            module = ROOT / "tools" / "kube" / "releases" / minor / "go.mod"
            assert required(module).startswith(minor + "."), module
            assert f"k8s.io/api => k8s.io/api v0.{minor.removeprefix('v1.')}." in module.read_text()


def test_the_chart_and_the_docs_promise_exactly_the_tested_releases() -> None:
    minors = [m.removeprefix("v") for m in matrix()]
    chart = yaml.safe_load((ROOT / "deploy" / "chart" / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={minors[0]}.0-0"
    docs = (ROOT / "docs" / "operations.md").read_text()
    [said] = re.findall(r"\*\*Tested on Kubernetes ([0-9., and]+)\*\*", docs)
    assert re.split(r", | and ", said) == minors, said
    for path in (ROOT / "docs" / "operations.md", ROOT / "deploy" / "sidecar" / "component" / "kustomization.yaml"):
        floors = set(re.findall(r"Kubernetes (1\.\d+) and later", path.read_text()))
        assert floors == {minors[0]}, (path, floors)


def test_ci_runs_every_release_of_the_matrix() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "tools/kube/build --matrix" in ci and 'tools/kube/build --release "$minor"' in ci
    assert "tests/conformance tests/realkube/test_admission.py" in ci and "tests/realkube/test_chart.py" in ci


def test_the_real_node_runs_the_oldest_and_the_newest_kubelet() -> None:
    """The matrix's two ends build their kubelet (tools/kube/releases/new --kubelet) and CI runs the real
    node's kubelet tests and the native sidecar against each; the main release's kubelet runs the whole
    real-node tier."""
    minors = matrix()
    nodes = subprocess.run([str(BUILD), "--nodes"], capture_output=True, text=True, check=True).stdout.split()
    assert nodes == [minors[0], minors[-1]], nodes
    for minor in minors[1:-1]:
        module = ROOT / "tools" / "kube" / "releases" / minor / "go.mod"
        assert not module.is_file() or "tool k8s.io/kubernetes/cmd/kubelet" not in module.read_text(), minor
    ci = (ROOT / ".ci" / "run").read_text()
    assert "node_minors=$(tools/kube/build --nodes)" in ci
    assert 'tools/kube/build --release "$minor" --node --dir' in ci
    assert "tests/node/test_kubelet.py" in ci and "test_the_sidecar_never_keeps_its_host_from_starting" in ci
