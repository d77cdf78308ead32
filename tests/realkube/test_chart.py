"""deploy/chart, the Helm chart, read by the Helm tools/kube/build builds and applied to a real API
server: it lints, its values schema refuses what the chart cannot honour, it renders exactly the
objects of the kustomize base (deploy/ and deploy/monitoring) but for Helm's own labels, and what it
renders is accepted by kube-apiserver's server-side apply, RBAC included (the ServiceAccount may do
what the Role says in each namespace it sweeps, and nothing in any other)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chart_render import CHART, ROOT, by_identity, helm, objects, without_helm_labels
from harness.kubeapiserver import KubeApiServer

ALL_ON = ("--set", "monitoring.podMonitor.enabled=true", "--set", "monitoring.prometheusRule.enabled=true")


def test_the_chart_lints_strictly(kube_apiserver: KubeApiServer, helm_binary: str) -> None:
    done = helm(kube_apiserver.bindir, "lint", "--strict", str(CHART), binary=helm_binary)
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("values", "said"),
    [
        (("--set", "replica=3"), "replica"),  # a misspelt key is refused, not ignored
        (("--set", "replicas=-1"), "replicas"),
        (("--set", "settings.POD_SWEEPER_NAMESPACES=other"), "POD_SWEEPER_NAMESPACES"),  # the chart's own
        (("--set", "settings.EVENTS=false"), "EVENTS"),  # not a setting of ours
        (("--set", "image.digest=latest"), "digest"),
        (("--set", "sweepNamespaces={Bad_Name}"), "sweepNamespaces"),
    ],
)
def test_the_values_schema_refuses_what_the_chart_cannot_honour(
    kube_apiserver: KubeApiServer, helm_binary: str, values: tuple[str, ...], said: str
) -> None:
    done = helm(kube_apiserver.bindir, "template", "pod-sweeper", str(CHART), *values, check=False, binary=helm_binary)
    assert done.returncode != 0
    assert said in done.stderr, done.stderr


def test_the_chart_renders_the_kustomize_bases_objects(kube_apiserver: KubeApiServer, helm_binary: str) -> None:
    chart = objects(
        helm(
            kube_apiserver.bindir, "template", "pod-sweeper", str(CHART), "-n", "sandboxes", *ALL_ON, binary=helm_binary
        ).stdout
    )
    kustomized = [
        *objects(kube_apiserver.kubectl("kustomize", str(ROOT / "deploy"))),
        *objects(kube_apiserver.kubectl("kustomize", str(ROOT / "deploy" / "monitoring"))),
    ]
    rendered, expected = by_identity([without_helm_labels(d) for d in chart]), by_identity(kustomized)
    assert sorted(rendered) == sorted(expected)
    for identity, obj in expected.items():
        assert rendered[identity] == obj, identity
    # Helm's labels are there, on every object, and the replicas' selector is the release's own.
    for doc in chart:
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm", doc["metadata"]["name"]
    deployment = next(d for d in chart if d["kind"] == "Deployment")
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "pod-sweeper",
        "app.kubernetes.io/instance": "pod-sweeper",
    }


def test_values_reach_what_they_name(kube_apiserver: KubeApiServer, helm_binary: str) -> None:
    digest = "sha256:" + "ab" * 32
    chart = objects(
        helm(
            kube_apiserver.bindir, "template", "edge", str(CHART), "-n", "sweepers", *ALL_ON,
            "--set", f"image.digest={digest}", "--set", "settings.POD_SWEEPER_EVENTS=false",
            "--set", "sweepNamespaces={team-a,team-b}", "--set", "database.existingSecret=db-urls",
            "--set", "migrate.enabled=false", "--set", "podDisruptionBudget.enabled=false",
            "--set", "monitoring.prometheusRule.runbookBaseUrl=https://wiki.example.invalid/pod-sweeper",
            binary=helm_binary,
        ).stdout
    )  # fmt: skip
    found = by_identity(chart)
    assert ("Job", "sweepers", "edge-pod-sweeper-migrate") not in found
    assert not any(kind == "PodDisruptionBudget" for kind, _, _ in found)
    assert {(ns, name) for kind, ns, name in found if kind in ("Role", "RoleBinding")} == {
        ("team-a", "edge-pod-sweeper"),
        ("team-b", "edge-pod-sweeper"),
    }
    container = found[("Deployment", "sweepers", "edge-pod-sweeper")]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"registry.example.invalid/pod-sweeper@{digest}"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_SWEEPER_NAMESPACES"] == {"name": "POD_SWEEPER_NAMESPACES", "value": "team-a,team-b"}
    assert env["POD_SWEEPER_EVENTS"]["value"] == "false"
    assert env["POD_SWEEPER_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "db-urls"
    rule = found[("PrometheusRule", "sweepers", "edge-pod-sweeper")]
    urls = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert urls and all(u.startswith("https://wiki.example.invalid/pod-sweeper#podsweeper") for u in urls), urls


def test_the_migrate_job_lands_where_the_replicas_may_or_where_its_own_values_say(
    kube_apiserver: KubeApiServer,
    helm_binary: str,
) -> None:
    """The hook's pod takes the Deployment's scheduling values (a cluster whose nodes are all tainted
    runs it where it runs the replicas), or its own when set; {} or [] sets none."""
    scheduling = (
        "--set", "priorityClassName=sweepers", "--set-json", 'nodeSelector={"pool": "system"}',
        "--set-json", 'tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]',
        "--set-json", 'affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}',
    )  # fmt: skip

    def pod_specs(*values: str) -> tuple[dict[str, Any], dict[str, Any]]:
        found = by_identity(
            objects(helm(kube_apiserver.bindir, "template", "p", str(CHART), *values, binary=helm_binary).stdout)
        )
        job = next(o for (kind, _, _), o in found.items() if kind == "Job")
        deployment = next(o for (kind, _, _), o in found.items() if kind == "Deployment")
        return job["spec"]["template"]["spec"], deployment["spec"]["template"]["spec"]

    job, deployment = pod_specs(*scheduling)
    for key in ("priorityClassName", "nodeSelector", "tolerations", "affinity"):
        assert job[key] == deployment[key], key
    own, _ = pod_specs(
        *scheduling, "--set", "migrate.priorityClassName=migrations", "--set-json", "migrate.tolerations=[]",
        "--set-json", 'migrate.nodeSelector={"pool": "jobs"}',
    )  # fmt: skip
    assert (own["priorityClassName"], own["nodeSelector"]) == ("migrations", {"pool": "jobs"})
    assert "tolerations" not in own  # [] : none
    assert own["affinity"] == deployment["affinity"]  # not set: the Deployment's


def test_what_the_chart_renders_applies_server_side_and_grants_only_the_swept_namespaces(
    kube_apiserver: KubeApiServer, helm_binary: str, tmp_path: Path
) -> None:
    server = kube_apiserver
    for namespace in ("chart-home", "chart-team-a", "chart-team-b", "chart-elsewhere"):
        server.namespace(namespace)
    rendered = helm(
        server.bindir, "template", "sweeper", str(CHART), "-n", "chart-home",
        "--set", "sweepNamespaces={chart-team-a,chart-team-b}", binary=helm_binary,
    ).stdout  # fmt: skip
    out = server.kubectl("apply", "--server-side", "--field-manager=helm-template-test", "-f", "-", stdin=rendered)
    assert "deployment.apps/sweeper-pod-sweeper serverside-applied" in out, out
    token = server.kubectl("create", "token", "sweeper-pod-sweeper", "--namespace=chart-home").strip()
    account = server.token_kubeconfig(tmp_path / "sa.kubeconfig", token, namespace="chart-home")
    for namespace, allowed in (
        ("chart-team-a", True),
        ("chart-team-b", True),
        ("chart-home", False),
        ("chart-elsewhere", False),
    ):
        for verb in ("get", "list", "delete"):
            answer = server.kubectl(
                "auth", "can-i", verb, "pods", f"--namespace={namespace}", kubeconfig_path=account, check=False
            ).strip()
            assert answer == ("yes" if allowed else "no"), (namespace, verb, answer)
        assert (
            server.kubectl(
                "auth", "can-i", "watch", "pods", f"--namespace={namespace}", kubeconfig_path=account, check=False
            ).strip()
            == "no"
        )
