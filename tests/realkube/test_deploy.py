"""deploy/ applied to a real API server: the kustomization server-side applied exactly as
docs/operations.md says (on a plain cluster, without prometheus-operator; deploy/monitoring once its
CRDs are in), a token for the shipped ServiceAccount minted by the server, RBAC evaluated by the server
(exactly what docs/operations.md says the daemon needs, nothing more), and the daemon sweeping with that
token, ``check`` included (and failing where the Role lacks what a feature needs)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import psycopg
import yaml

from conformance.apiserver import core_api, manifest
from harness.kubeapiserver import KubeApiServer
from helpers import DaemonThread, cli, daemon_settings, retire, wait_until

ROOT = Path(__file__).resolve().parents[2]
NS = "sandboxes"  # the kustomization's namespace
CRDS = ("podmonitors", "prometheusrules")  # prometheus-operator's, for deploy/monitoring


def documented_rules() -> dict[str, list[str]]:
    """What docs/operations.md says the shipped ServiceAccount may do: resource -> verbs, nothing else."""
    text = (ROOT / "docs" / "operations.md").read_text()
    line = next(x for x in text.splitlines() if "the daemon's identity:" in x)
    said = line.split("the daemon's identity:")[1].split(" in that namespace")[0]
    return {
        resource: re.findall(r"`(\w+)`", verbs) for verbs, resource in re.findall(r"((?:`\w+`(?:, )?)+) on (\w+)", said)
    }


def can_i_list(server: KubeApiServer, kubeconfig: Path) -> set[str]:
    """``kubectl auth can-i --list`` in the namespace, one normalised line per rule."""
    out = server.kubectl("auth", "can-i", "--list", f"--namespace={NS}", "--no-headers", kubeconfig_path=kubeconfig)
    return {" ".join(line.split()) for line in out.splitlines() if line.strip()}


def apply_deploy(server: KubeApiServer, folder: str = "deploy") -> str:
    """``kubectl apply --server-side -k <folder>``, the command docs/operations.md gives; kubectl's
    output (a non-zero exit raises)."""
    server.namespace(NS)
    return server.kubectl("apply", "--server-side", "--field-manager=pod-sweeper-test", "-k", str(ROOT / folder))


def operator_crds(server: KubeApiServer) -> list[Path]:
    """prometheus-operator's PodMonitor and PrometheusRule CRDs, fetched by tools/kube/build."""
    folder = server.bindir / "crds"
    paths = [folder / f"monitoring.coreos.com_{name}.yaml" for name in CRDS]
    missing = [p.name for p in paths if not p.is_file()]
    assert not missing, f"{folder} lacks {', '.join(missing)}: run tools/kube/build"
    return paths


def test_the_manifests_apply_and_the_token_can_do_exactly_what_the_docs_say(
    kube_apiserver: KubeApiServer, tmp_path: Path
) -> None:
    # A plain cluster: no prometheus-operator (deploy/monitoring's test removes its CRDs again).
    for name in CRDS:
        found = kube_apiserver.kubectl("get", "crd", f"{name}.monitoring.coreos.com", "--ignore-not-found")
        assert found.strip() == "", name
    out = apply_deploy(kube_apiserver)
    for kind in ("serviceaccount/pod-sweeper", "role.rbac.authorization.k8s.io/pod-sweeper", "deployment.apps"):
        assert kind in out
    token = kube_apiserver.kubectl("create", "token", "pod-sweeper", f"--namespace={NS}").strip()
    assert token.count(".") == 2  # a JWT the server signed
    shipped = kube_apiserver.token_kubeconfig(tmp_path / "sa.kubeconfig", token, namespace=NS)
    # What any service account may do anyway (discovery, self reviews) is the baseline to subtract.
    kube_apiserver.request("POST", f"/api/v1/namespaces/{NS}/serviceaccounts", {"metadata": {"name": "bare"}})
    bare_token = kube_apiserver.kubectl("create", "token", "bare", f"--namespace={NS}").strip()
    bare = kube_apiserver.token_kubeconfig(tmp_path / "bare.kubeconfig", bare_token, namespace=NS)
    granted = can_i_list(kube_apiserver, shipped) - can_i_list(kube_apiserver, bare)
    rules = documented_rules()
    assert rules == {"pods": ["get", "list", "delete"], "events": ["create"]}, rules
    assert granted == {f"{resource} [] [] [{' '.join(verbs)}]" for resource, verbs in rules.items()}
    for args in (("delete", "pods", "--namespace=default"), ("get", "secrets", f"--namespace={NS}")):
        answer = kube_apiserver.kubectl("auth", "can-i", *args, kubeconfig_path=shipped, check=False)
        assert answer.strip() == "no", args


def test_the_daemon_sweeps_and_checks_with_the_minted_token(
    kube_apiserver: KubeApiServer, execs: psycopg.Connection[Any], db_url: str, tmp_path: Path
) -> None:
    apply_deploy(kube_apiserver)
    token = kube_apiserver.kubectl("create", "token", "pod-sweeper", f"--namespace={NS}").strip()
    kubeconfig = kube_apiserver.token_kubeconfig(tmp_path / "sa.kubeconfig", token, namespace=NS)
    admin = core_api(kube_apiserver.admin_kubeconfig)
    names = [f"sweep-{uuid.uuid4().hex[:8]}" for _ in range(4)]
    uids: dict[str, str] = {}
    for i, name in enumerate(names):
        pod = admin.create_namespaced_pod(NS, manifest(name))
        uids[name] = pod.metadata.uid
        execs.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
            " VALUES (%s, 1, %s, %s, %s, true)",
            (name, NS, name, uuid.UUID(pod.metadata.uid)),
        )
        if i % 2 == 0:
            retire(execs, name)
    checked = cli("check", f"--namespace={NS}", url=db_url, POD_SWEEPER_KUBECONFIG=str(kubeconfig))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok    delete pods in sandboxes: allowed" in checked.stdout
    assert "ok    create events in sandboxes: allowed" in checked.stdout  # Events are on by default
    settings = daemon_settings(db_url, kubeconfig, request_timeout=5.0, lease_seconds=15.0, events=True)
    done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done' AND outcome = 'deleted'"
    with DaemonThread(settings) as daemon:
        wait_until(lambda: execs.execute(done).fetchone()["n"] == 2, timeout=30, what="two retired pods deleted")
        metrics = daemon.daemon.metrics
        wait_until(lambda: metrics.value("pod_sweeper_events_total", result="sent") == 2, what="two events sent")
    left = {p.metadata.name for p in admin.list_namespaced_pod(NS).items}
    assert {n for n in names if n in left} == {names[1], names[3]}
    # Each deletion left an Event the token was allowed to create, where `kubectl get events` shows it.
    recorded = json.loads(kube_apiserver.kubectl("get", "events", f"--namespace={NS}", "-o", "json"))["items"]
    retired = {e["involvedObject"]["name"]: e for e in recorded if e["reason"] == "Retired"}
    assert set(retired) & set(names) == {names[0], names[2]}
    event = retired[names[0]]
    assert event["involvedObject"]["uid"] == uids[names[0]] and event["reportingComponent"] == "pod-sweeper"
    assert event["source"]["component"] == "pod-sweeper" and event["message"].startswith("Deleted by pod-sweeper")


def test_the_sidecar_example_applies_with_its_native_sidecar_and_the_hosts_account_may_sweep(
    kube_apiserver: KubeApiServer, tmp_path: Path
) -> None:
    kube_apiserver.namespace(NS)
    kube_apiserver.kubectl(
        "apply", "--server-side", "--field-manager=pod-sweeper-test", "-f", str(ROOT / "deploy" / "role.yaml")
    )
    example = ROOT / "deploy" / "sidecar" / "example"
    kube_apiserver.kubectl("apply", "--server-side", "--field-manager=pod-sweeper-test", "-k", str(example))
    stored = json.loads(kube_apiserver.kubectl("get", "deployment", "control-plane", f"--namespace={NS}", "-o", "json"))
    [sidecar] = stored["spec"]["template"]["spec"]["initContainers"]  # kept by the server, not pruned
    assert sidecar["restartPolicy"] == "Always" and "readinessProbe" not in sidecar
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/livez"
    token = kube_apiserver.kubectl("create", "token", "control-plane", f"--namespace={NS}").strip()
    host = kube_apiserver.token_kubeconfig(tmp_path / "host.kubeconfig", token, namespace=NS)
    for args, expected in (
        (("delete", "pods", f"--namespace={NS}"), "yes"),
        (("delete", "pods", "--namespace=default"), "no"),
        (("get", "secrets", f"--namespace={NS}"), "no"),
    ):
        answer = kube_apiserver.kubectl("auth", "can-i", *args, kubeconfig_path=host, check=False)
        assert answer.strip() == expected, args


def test_with_the_shipped_role_a_namespace_outside_it_waits_alone_and_the_replica_stays_ready(
    kube_apiserver: KubeApiServer, execs: psycopg.Connection[Any], db_url: str, tmp_path: Path
) -> None:
    """The real server's 403 for a namespace the Role does not cover holds back that namespace's rows
    alone; a row in kube-system (outside the default scope) ends dead with no request at all."""
    apply_deploy(kube_apiserver)
    elsewhere = kube_apiserver.namespace(f"elsewhere-{uuid.uuid4().hex[:6]}")
    kube_apiserver.namespace("kube-system")  # exists; this gives it the default service account pods need
    token = kube_apiserver.kubectl("create", "token", "pod-sweeper", f"--namespace={NS}").strip()
    kubeconfig = kube_apiserver.token_kubeconfig(tmp_path / "sa.kubeconfig", token, namespace=NS)
    admin = core_api(kube_apiserver.admin_kubeconfig)
    rows: dict[str, tuple[str, str]] = {}
    for sid, namespace in (("out", elsewhere), ("sys", "kube-system"), *((f"in{i}", NS) for i in range(5))):
        name = f"{sid}-{uuid.uuid4().hex[:6]}"
        pod = admin.create_namespaced_pod(namespace, manifest(name))
        rows[sid] = (namespace, name)
        execs.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
            " VALUES (%s, 1, %s, %s, %s, false)",
            (sid, namespace, name, uuid.UUID(pod.metadata.uid)),
        )
    settings = daemon_settings(db_url, kubeconfig, backoff_base=0.2, backoff_max=1.0, poll_interval=0.5)
    finished = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status IN ('done', 'dead')"
    with DaemonThread(settings) as daemon:
        wait_until(lambda: execs.execute(finished).fetchone()["n"] == 6, timeout=30, what="six rows finished")
        refused = daemon.daemon.metrics.value("pod_sweeper_namespace_refused", pod_namespace=elsewhere)
        assert refused == 1 and daemon.daemon.ready
    by_sid = {r["sandbox_id"]: r for r in execs.execute("SELECT * FROM pod_sweeper.outbox").fetchall()}
    assert all(by_sid[f"in{i}"]["outcome"] == "deleted" for i in range(5))
    out = by_sid["out"]
    assert (out["status"], out["attempts"], out["last_http_status"]) == ("pending", 0, 403)
    assert "forbidden" in out["last_error"].lower() and elsewhere in out["last_error"]
    system = by_sid["sys"]
    assert system["status"] == "dead" and "Kubernetes' own" in system["last_error"]
    for sid in ("out", "sys"):
        namespace, name = rows[sid]
        assert admin.read_namespaced_pod(name, namespace).metadata.deletion_timestamp is None


def test_check_fails_where_the_role_lacks_what_an_enabled_feature_needs(
    kube_apiserver: KubeApiServer, execs: psycopg.Connection[Any], db_url: str, tmp_path: Path
) -> None:
    """A Role without ``create`` on events: ``check`` exits 1 naming it while Events are on, and passes
    with them off; reconciliation asks for ``list`` where it runs, and forcing stuck pods for ``get`` on
    nodes, which no Role can grant."""
    namespace = kube_apiserver.namespace(f"lean-{uuid.uuid4().hex[:6]}")
    role = yaml.safe_load((ROOT / "deploy" / "role.yaml").read_text())
    role["metadata"]["namespace"] = namespace
    role["rules"] = [rule for rule in role["rules"] if rule["resources"] != ["events"]]
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "lean", "namespace": namespace}}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "lean", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": "lean", "namespace": namespace}],
    }
    kube_apiserver.kubectl(
        "apply",
        "--server-side",
        "--field-manager=pod-sweeper-test",
        "-f",
        "-",
        stdin=yaml.safe_dump_all([role, account, binding]),
    )
    token = kube_apiserver.kubectl("create", "token", "lean", f"--namespace={namespace}").strip()
    kubeconfig = kube_apiserver.token_kubeconfig(tmp_path / "lean.kubeconfig", token, namespace=namespace)
    env = {"POD_SWEEPER_KUBECONFIG": str(kubeconfig)}

    events_on = cli("check", f"--namespace={namespace}", url=db_url, **env)
    assert events_on.returncode == 1, events_on.stdout + events_on.stderr
    assert f"ok    delete pods in {namespace}: allowed" in events_on.stdout
    [line] = [x for x in events_on.stdout.splitlines() if x.startswith("FAIL")]
    assert line == (
        f"FAIL  create events in {namespace}: missing: the daemon needs 'create' on events in {namespace} "
        "to record an Event (POD_SWEEPER_EVENTS is on)"
    )
    events_off = cli("check", f"--namespace={namespace}", url=db_url, POD_SWEEPER_EVENTS="false", **env)
    assert events_off.returncode == 0, events_off.stdout + events_off.stderr
    assert "create events" not in events_off.stdout

    features = {
        "POD_SWEEPER_EVENTS": "false",
        "POD_SWEEPER_RECONCILE_SANDBOX_LABEL": "sandbox",
        "POD_SWEEPER_RECONCILE_GENERATION_LABEL": "generation",
        "POD_SWEEPER_RECONCILE_NAMESPACE": namespace,
        "POD_SWEEPER_FORCE_STUCK": "true",
    }
    more = cli("check", f"--namespace={namespace}", url=db_url, **env, **features)
    assert more.returncode == 1, more.stdout + more.stderr
    assert f"ok    list pods in {namespace}: allowed" in more.stdout  # the Role grants list
    assert "FAIL  get nodes (cluster-wide): missing: the daemon needs 'get' on nodes (cluster-wide)" in more.stdout


def test_the_monitoring_kustomization_applies_once_prometheus_operators_crds_are_in(
    kube_apiserver: KubeApiServer,
) -> None:
    """deploy/monitoring, with the operator's own CRDs (from its published module) on the real server;
    the server validates the PodMonitor and the PrometheusRule against their schemas. The CRDs are
    removed again, so that the other tests see a plain cluster."""
    crds = operator_crds(kube_apiserver)
    try:
        for path in crds:
            kube_apiserver.kubectl("apply", "--server-side", "--field-manager=pod-sweeper-test", "-f", str(path))
        names = [f"crd/{name}.monitoring.coreos.com" for name in CRDS]
        kube_apiserver.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        out = apply_deploy(kube_apiserver, "deploy/monitoring")
        assert "podmonitor.monitoring.coreos.com/pod-sweeper serverside-applied" in out, out
        assert "prometheusrule.monitoring.coreos.com/pod-sweeper serverside-applied" in out, out
        stored = json.loads(
            kube_apiserver.kubectl("get", "prometheusrule", "pod-sweeper", f"--namespace={NS}", "-o", "json")
        )
        shipped = yaml.safe_load((ROOT / "deploy" / "monitoring" / "prometheusrule.yaml").read_text())
        alerts = [[rule.get("alert") for rule in group["rules"]] for group in stored["spec"]["groups"]]
        assert alerts == [[rule.get("alert") for rule in group["rules"]] for group in shipped["spec"]["groups"]]
    finally:
        kube_apiserver.kubectl(
            "delete",
            "--ignore-not-found",
            "--wait=true",
            "--timeout=60s",
            *[f"crd/{n}.monitoring.coreos.com" for n in CRDS],
        )
