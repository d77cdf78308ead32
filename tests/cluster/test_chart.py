"""The Helm chart installed, upgraded and rolled back on the whole cluster, as a platform team does it:
``helm install`` runs the migrate Job as its pre-install hook and waits for it, the daemon sweeps as the
chart's ServiceAccount with the environment the chart's Deployment gives it, ``helm upgrade`` migrates
again first, and ``helm rollback`` restores the earlier release without migrating.

kwok runs no container, so the migrate Job's pods (labelled to be left alone by kwok's stages) are run
by ``JobPods`` below, as a kubelet would: the container's args through the real CLI, its environment
resolved from the Secret the chart names, and the pod's status written back, so that the real Job
controller completes the Job and Helm sees it. The daemon itself runs here as a subprocess, with a token
the TokenRequest API mints for the chart's ServiceAccount and the Deployment's environment resolved the
same way."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from chart_render import CHART, helm
from harness.kubecluster import KubeCluster
from helpers import attach_table, clean_env, create_executions, run, spawn_daemon, stop_process, wait_until

NS = "chart-sweep"
RELEASE = "pod-sweeper"
MERGE_PATCH = "application/merge-patch+json"
SILENT = {"migrate.podLabels.pod-sweeper\\.test/silent": "true"}  # kwok's stages leave these pods alone


def resolve_env(cluster: KubeCluster, pod_name: str, env: list[dict[str, Any]]) -> dict[str, str]:
    """A container's environment as the kubelet gives it: values, Secret keys, the pod's own fields."""
    resolved: dict[str, str] = {}
    for entry in env:
        if "value" in entry:
            resolved[entry["name"]] = entry["value"]
            continue
        source = entry["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            status, secret = cluster.request("GET", f"/api/v1/namespaces/{NS}/secrets/{ref['name']}")
            assert status == 200, secret
            resolved[entry["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        else:
            field = source["fieldRef"]["fieldPath"]
            resolved[entry["name"]] = {"metadata.namespace": NS, "metadata.name": pod_name}[field]
    return resolved


class JobPods:
    """Plays the kubelet for the migrate Job's pods: runs each one's container once, through the real
    ``pod-sweeper`` CLI, and reports it Succeeded or Failed with its exit code."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster
        self.ran: list[tuple[str, subprocess.CompletedProcess[str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="job-pods", daemon=True)
        self.failure: BaseException | None = None

    def _loop(self) -> None:
        try:
            while not self._stop.wait(0.2):
                selector = "app.kubernetes.io/component%3Dmigrate"
                _, pods = self.cluster.request("GET", f"/api/v1/namespaces/{NS}/pods?labelSelector={selector}")
                for pod in pods.get("items") or []:
                    # As a kubelet: a finished pod (an earlier install's, whose Job is being deleted) is not run again.
                    finished = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
                    if not finished and pod["metadata"]["name"] not in {name for name, _ in self.ran}:
                        self._run(pod)
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.failure = exc

    def _run(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        container = pod["spec"]["containers"][0]
        started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = subprocess.run(
            [sys.executable, "-m", "pod_sweeper", *container["args"]],
            env=clean_env(**resolve_env(self.cluster, name, container.get("env") or [])),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        self.ran.append((name, done))
        finished = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        terminated = {"exitCode": done.returncode, "reason": "Completed" if done.returncode == 0 else "Error",
                      "startedAt": started, "finishedAt": finished}  # fmt: skip
        status = {
            "phase": "Succeeded" if done.returncode == 0 else "Failed",
            "containerStatuses": [
                {"name": container["name"], "image": container["image"], "imageID": "", "ready": False,
                 "restartCount": 0, "started": False, "state": {"terminated": terminated}}
            ],
        }  # fmt: skip
        answer = self.cluster.request(
            "PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", {"status": status}, content_type=MERGE_PATCH
        )
        assert answer[0] == 200, answer

    def __enter__(self) -> JobPods:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def deployment(cluster: KubeCluster) -> dict[str, Any]:
    status, found = cluster.request("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/{RELEASE}")
    assert status == 200, found
    return dict(found)


def sweeps_as_the_chart_runs_it(
    cluster: KubeCluster, conn: psycopg.Connection[Any], tmp_path: Path, sid: str
) -> list[str]:
    """The daemon with the Deployment's environment and the chart's ServiceAccount's token deletes the
    pod of a retired generation; its log lines."""
    spec = deployment(cluster)["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["args"] == ["run"]
    env = resolve_env(cluster, f"{RELEASE}-replica", container["env"])
    token = cluster.token(NS, spec["serviceAccountName"])
    kubeconfig = cluster.token_kubeconfig(tmp_path / f"{sid}.kubeconfig", token, namespace=NS)
    env.update(POD_SWEEPER_KUBECONFIG=str(kubeconfig), POD_SWEEPER_HTTP_PORT="0", POD_SWEEPER_POLL_INTERVAL="1")
    pod = cluster.pod(NS, f"sandbox-{sid}")
    conn.execute(
        "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid) VALUES (%s, 1, %s, %s, %s)",
        (sid, NS, pod["metadata"]["name"], pod["metadata"]["uid"]),
    )
    log = tmp_path / f"{sid}.log"
    daemon = spawn_daemon(clean_env(**env), log)
    try:
        conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (sid,))
        done = "SELECT outcome FROM pod_sweeper.outbox WHERE sandbox_id = %s AND status = 'done'"
        wait_until(lambda: conn.execute(done, (sid,)).fetchone(), timeout=60, what=f"{sid}'s row done")
        assert conn.execute(done, (sid,)).fetchone()[0] == "deleted"
        wait_until(lambda: cluster.get_pod(NS, pod["metadata"]["name"]) is None, timeout=30, what="the pod gone")
    finally:
        assert stop_process(daemon) == 0, log.read_text()
    return log.read_text().splitlines()


@pytest.fixture
def runtime_role(empty_db_url: str) -> Any:
    name = f"chart_runtime_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'chart-pw'").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_helm_installs_upgrades_and_rolls_back_and_the_daemon_sweeps_as_the_charts_account(
    kube_cluster: KubeCluster, helm_binary: str, empty_db_url: str, runtime_role: str, tmp_path: Path
) -> None:
    cluster = kube_cluster
    cluster.namespace(NS)
    cluster.add_node()  # where kwok runs the replicas (the migrate Job's pods are JobPods')
    secret = {
        "metadata": {"name": RELEASE},
        "stringData": {
            "database-url": make_conninfo(empty_db_url, user=runtime_role, password="chart-pw"),
            "migrate-database-url": empty_db_url,
        },
    }
    cluster.request("DELETE", f"/api/v1/namespaces/{NS}/secrets/{RELEASE}")  # the other Helm's run left it
    status, answer = cluster.request("POST", f"/api/v1/namespaces/{NS}/secrets", secret)
    assert status == 201, answer

    def install_args(*extra: str) -> list[str]:
        return [
            *(f"--set-string={k}={v}" for k, v in SILENT.items()),
            "--namespace",
            NS,
            "--wait",
            "--timeout",
            "90s",
            *extra,
        ]

    def history() -> list[tuple[int, str, str]]:
        out = helm(
            cluster.bindir,
            "history",
            RELEASE,
            "-n",
            NS,
            "-o",
            "json",
            kubeconfig=cluster.admin_kubeconfig,
            binary=helm_binary,
        )
        return [(r["revision"], r["status"], r["description"]) for r in json.loads(out.stdout)]

    with JobPods(cluster) as job_pods, psycopg.connect(empty_db_url, autocommit=True) as conn:
        # install: the hook migrates an empty database, as the schema owner, before anything else exists.
        helm(
            cluster.bindir,
            "install",
            RELEASE,
            str(CHART),
            *install_args(),
            kubeconfig=cluster.admin_kubeconfig,
            binary=helm_binary,
        )
        assert job_pods.failure is None, job_pods.failure
        assert len(job_pods.ran) == 1 and job_pods.ran[0][1].returncode == 0, job_pods.ran
        assert conn.execute("SELECT to_regclass('pod_sweeper.outbox') IS NOT NULL").fetchone()[0]
        ready = deployment(cluster)["status"]
        assert ready.get("readyReplicas") == 2, ready  # --wait: kwok's replicas Running and Ready
        # The DBA's part, as docs/operations.md has it: the host table attached, the runtime role granted.
        create_executions(conn)
        run(attach_table(empty_db_url))
        conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
            sql.Identifier(conn.info.dbname), sql.Identifier(runtime_role)))  # fmt: skip
        grant = subprocess.run(
            [sys.executable, "-m", "pod_sweeper", "grant", runtime_role, "--apply"],
            env=clean_env(POD_SWEEPER_DATABASE_URL=empty_db_url), capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert grant.returncode == 0, grant.stderr
        sweeps_as_the_chart_runs_it(cluster, conn, tmp_path, "installed")

        # upgrade: a changed value; the hook migrates again (nothing to do) before the Deployment rolls.
        helm(cluster.bindir, "upgrade", RELEASE, str(CHART), *install_args("--reuse-values", "--set=replicas=3",
             "--set=settings.POD_SWEEPER_MAX_ATTEMPTS=40"), kubeconfig=cluster.admin_kubeconfig,
             binary=helm_binary)  # fmt: skip
        assert len(job_pods.ran) == 2 and job_pods.ran[1][1].returncode == 0, job_pods.ran
        upgraded = deployment(cluster)
        assert upgraded["spec"]["replicas"] == 3
        env = {e["name"]: e.get("value") for e in upgraded["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["POD_SWEEPER_MAX_ATTEMPTS"] == "40"

        # rollback: the first release's objects again, and no hook (the older daemon reads the schema).
        helm(cluster.bindir, "rollback", RELEASE, "1", "-n", NS, "--wait", "--timeout", "90s",
             kubeconfig=cluster.admin_kubeconfig, binary=helm_binary)  # fmt: skip
        assert len(job_pods.ran) == 2
        rolled = deployment(cluster)
        assert rolled["spec"]["replicas"] == 2
        names = {e["name"] for e in rolled["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert "POD_SWEEPER_MAX_ATTEMPTS" not in names
        assert [(r, s) for r, s, _ in history()] == [(1, "superseded"), (2, "superseded"), (3, "deployed")]
        sweeps_as_the_chart_runs_it(cluster, conn, tmp_path, "rolled-back")
        assert job_pods.failure is None, job_pods.failure

    helm(
        cluster.bindir,
        "uninstall",
        RELEASE,
        "-n",
        NS,
        "--wait",
        kubeconfig=cluster.admin_kubeconfig,
        binary=helm_binary,
    )
    for kind in ("serviceaccounts", "secrets"):
        status, _ = cluster.request("GET", f"/api/v1/namespaces/{NS}/{kind}/{RELEASE}")
        assert status == (404 if kind == "serviceaccounts" else 200), kind  # the Secret was never the chart's
