"""The daemon as the shipped ServiceAccount on a whole cluster: its token comes from the TokenRequest API
(what a kubelet mounts), its requests go through API Priority and Fairness in the default configuration
(not exempt: the service-accounts flow schema, priority level workload-low), and a burst of 2,000
retires drains at the shipped rate limit without drawing a single 429, and with the limit off as fast as
the server lets it. Then a cluster admin confines the account to a small priority level that rejects
rather than queues (a FlowSchema, as one does with a noisy client): with the limit off it draws 429s,
and every one is retried, nothing lost and nothing charged."""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conformance.apiserver import core_api
from harness.kubecluster import KubeCluster
from helpers import DaemonThread, daemon_settings, wait_until

ROOT = Path(__file__).resolve().parents[2]
NS = "sandboxes"  # the shipped manifests' namespace
BURST = 2000
CONFINED = "pod-sweeper-test-confined"


@pytest.fixture(scope="module")
def shipped_identity(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deploy/'s ServiceAccount, Role and RoleBinding applied; a kubeconfig holding a bound token the
    TokenRequest API minted for the account."""
    kube_cluster.namespace(NS)
    for name in ("serviceaccount.yaml", "role.yaml", "rolebinding.yaml"):
        kube_cluster.kubectl(
            "apply", "--server-side", "--field-manager=pod-sweeper-test", "-f", str(ROOT / "deploy" / name)
        )
    token = kube_cluster.token(NS, "pod-sweeper")
    return kube_cluster.token_kubeconfig(tmp_path_factory.mktemp("sa") / "kubeconfig", token, namespace=NS)


def priority_level(cluster: KubeCluster, kubeconfig: Path) -> tuple[str, str]:
    """The flow schema and priority level API Priority and Fairness put this identity's request in (from
    the X-Kubernetes-PF-* headers of a real answer)."""
    token = json.loads(kubeconfig.read_text())["users"][0]["user"]["token"]
    context = ssl.create_default_context(cafile=str(cluster.ca))
    request = urllib.request.Request(f"{cluster.url}/api/v1/namespaces/{NS}/pods?limit=1")
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        schema_uid = answer.headers["X-Kubernetes-PF-FlowSchema-UID"]
        level_uid = answer.headers["X-Kubernetes-PF-PriorityLevel-UID"]
    schemas = cluster.request("GET", "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas")[1]["items"]
    levels = cluster.request("GET", "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations")[1]["items"]
    schema = next(s["metadata"]["name"] for s in schemas if s["metadata"]["uid"] == schema_uid)
    level = next(p["metadata"]["name"] for p in levels if p["metadata"]["uid"] == level_uid)
    return schema, level


def confine(cluster: KubeCluster) -> None:
    """The shipped account's requests in a priority level of a few seats that rejects what exceeds them."""
    api = "/apis/flowcontrol.apiserver.k8s.io/v1"
    level = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": CONFINED},
        "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1, "limitResponse": {"type": "Reject"}}},
    }
    schema = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": CONFINED},
        "spec": {
            "priorityLevelConfiguration": {"name": CONFINED},
            "matchingPrecedence": 500,  # before the default service-accounts schema (9000)
            "rules": [
                {
                    "subjects": [
                        {"kind": "ServiceAccount", "serviceAccount": {"name": "pod-sweeper", "namespace": NS}}
                    ],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"]}],
                }
            ],
        },
    }
    for path, body in ((f"{api}/prioritylevelconfigurations", level), (f"{api}/flowschemas", schema)):
        status, answer = cluster.request("POST", path, body)
        assert status == 201, answer


def unconfine(cluster: KubeCluster) -> None:
    api = "/apis/flowcontrol.apiserver.k8s.io/v1"
    for path in (f"{api}/flowschemas/{CONFINED}", f"{api}/prioritylevelconfigurations/{CONFINED}"):
        cluster.request("DELETE", path)


def burst_of_pods(cluster: KubeCluster, execs: psycopg.Connection[Any], tag: str, n: int = BURST) -> None:
    """``n`` pods (never scheduled: the API server ends them at their DELETE) and their execution rows."""
    core = core_api(cluster.admin_kubeconfig)  # system:masters: exempt, so the setup draws no 429 itself
    names = [f"{tag}-{i}" for i in range(n)]

    def create(name: str) -> tuple[str, str]:
        manifest = {
            "metadata": {"name": name},
            "spec": {
                "containers": [{"name": "sandbox", "image": "registry.k8s.io/pause:3.10"}],
                "nodeSelector": {"pod-sweeper.test/never-schedule": "true"},
            },
        }
        return name, core.create_namespaced_pod(NS, manifest).metadata.uid

    with ThreadPoolExecutor(8) as pool:
        created = list(pool.map(create, names))
    with (
        execs.cursor() as cur,
        cur.copy("COPY executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid) FROM STDIN") as copy,
    ):
        for name, uid in created:
            copy.write_row((name, 1, NS, name, uuid.UUID(uid)))


def drain(
    execs: psycopg.Connection[Any], db_url: str, kubeconfig: Path, tag: str, n: int = BURST, **limits: Any
) -> dict[str, float]:
    settings = daemon_settings(
        db_url, kubeconfig, events=True, max_attempts=34, backoff_base=0.5, backoff_max=5.0, **limits
    )
    with DaemonThread(settings) as daemon:
        started = time.monotonic()
        execs.execute("UPDATE executions SET active = false WHERE sandbox_id LIKE %s", (f"{tag}-%",))
        done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done' AND sandbox_id LIKE %s"
        wait_until(lambda: execs.execute(done, (f"{tag}-%",)).fetchone()["n"] == n, timeout=300, what="the burst")
        seconds = time.monotonic() - started
        metrics = daemon.daemon.metrics
        throttled = metrics.value("pod_sweeper_kube_responses_total", code="429")
    return {"rows_per_second": round(n / seconds, 1), "throttled": throttled}


def test_the_shipped_service_account_drains_a_burst_under_priority_and_fairness(
    kube_cluster: KubeCluster, shipped_identity: Path, execs: psycopg.Connection[Any], db_url: str
) -> None:
    cluster = kube_cluster
    schema, level = priority_level(cluster, shipped_identity)
    assert level != "exempt", (schema, level)
    print(f"the shipped ServiceAccount's requests: flow schema {schema}, priority level {level}")
    burst_of_pods(cluster, execs, "shipped")
    shipped = drain(execs, db_url, shipped_identity, "shipped", rate_limit_qps=50.0, rate_limit_burst=100)
    burst_of_pods(cluster, execs, "unlimited")
    unlimited = drain(execs, db_url, shipped_identity, "unlimited", rate_limit_qps=0)
    print(f"default APF, at the shipped rate limit: {shipped}; with the limit off: {unlimited}")
    assert shipped["throttled"] == 0  # the shipped limit stays under what the priority level admits
    assert 35 <= shipped["rows_per_second"] <= 60  # 50 a second (a burst of 100 first)
    confine(cluster)
    try:
        assert priority_level(cluster, shipped_identity)[1] == CONFINED
        burst_of_pods(cluster, execs, "confined", n=500)
        confined = drain(execs, db_url, shipped_identity, "confined", n=500, rate_limit_qps=0)
    finally:
        unconfine(cluster)
    print(f"confined to a priority level of a few seats that rejects, with the limit off: {confined}")
    assert confined["throttled"] > 0, "no 429 drawn: the confined priority level proved nothing"
    rows = execs.execute("SELECT status, outcome, attempts, last_error FROM pod_sweeper.outbox").fetchall()
    assert len(rows) == 2 * BURST + 500
    assert {(r["status"], r["outcome"], r["last_error"]) for r in rows} == {("done", "deleted", None)}
    assert {r["attempts"] for r in rows} == {1}  # every 429 was retried and none was charged
    held = execs.execute(
        "SELECT count(*) AS n FROM pod_sweeper.attempts WHERE result = 'handed_back' AND http_status = 429"
    ).fetchone()["n"]
    assert held == unlimited["throttled"] + confined["throttled"]  # each went back, uncharged, with its reason
    assert core_api(cluster.admin_kubeconfig).list_namespaced_pod(NS, limit=1).items == []
