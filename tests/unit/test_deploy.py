"""The shipped service file and manifests: they parse, they are least-privilege, and the alerts name
metrics the daemon really exports."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.demo.fakekube import GRANTED

ROOT = Path(__file__).resolve().parents[2]


def manifests() -> dict[str, Any]:
    """deploy/'s and deploy/monitoring's manifests by kind (deploy/'s Kustomization under that name,
    monitoring's under "Monitoring")."""
    docs = {}
    for path in sorted((ROOT / "deploy").glob("*.yaml")) + sorted((ROOT / "deploy" / "monitoring").glob("*.yaml")):
        [doc] = list(yaml.safe_load_all(path.read_text()))
        docs["Monitoring" if path.parent.name == "monitoring" and doc["kind"] == "Kustomization" else doc["kind"]] = doc
    return docs


def unit_file() -> dict[str, list[str]]:
    entries: dict[str, list[str]] = {}
    for line in (ROOT / "systemd" / "pod-sweeper.service").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            entries.setdefault(key.strip(), []).append(value.strip())
    return entries


def test_every_manifest_parses_and_is_namespaced() -> None:
    docs = manifests()
    assert set(docs) == {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Job",
        "Deployment",
        "PodDisruptionBudget",
        "PodMonitor",
        "PrometheusRule",
        "Kustomization",
        "Monitoring",
    }
    for kustomization, folder in (("Kustomization", ROOT / "deploy"), ("Monitoring", ROOT / "deploy" / "monitoring")):
        listed = set(docs[kustomization]["resources"])
        assert listed == {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}, kustomization
        assert docs[kustomization]["namespace"] == "sandboxes"
    # prometheus-operator's kinds need its CRDs: deploy/ alone must apply to a plain cluster.
    assert docs["Kustomization"]["resources"] == [
        r for r in docs["Kustomization"]["resources"] if "monitor" not in r and "prometheus" not in r
    ]
    for kind, doc in docs.items():
        if kind not in ("Kustomization", "Monitoring"):
            assert doc["metadata"]["namespace"] == "sandboxes", kind


def test_role_grants_only_what_the_daemon_uses() -> None:
    role = manifests()["Role"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},  # an Event on each deleted pod
    ]
    # The fake API server's access reviews answer from the same grants.
    assert {rule["resources"][0]: tuple(rule["verbs"]) for rule in role["rules"]} == GRANTED
    binding = manifests()["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-sweeper"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pod-sweeper", "namespace": "sandboxes"}]


def test_deployment_probes_replicas_and_grace_period() -> None:
    deployment = manifests()["Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    [container] = spec["containers"]
    assert deployment["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == "pod-sweeper"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    port = {p["name"]: p["containerPort"] for p in container["ports"]}["http"]
    env = {e["name"]: e for e in container["env"]}
    assert int(env["POD_SWEEPER_HTTP_PORT"]["value"]) == port
    shutdown = Settings.model_fields["shutdown_timeout"].default
    assert spec["terminationGracePeriodSeconds"] > shutdown + 10
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "valueFrom" in env["POD_SWEEPER_DATABASE_URL"]  # the password lives in a Secret


def test_alerts_use_exported_metrics() -> None:
    exported = {m.name for m in Metrics().registry.collect()}
    exported |= {f"{name}_total" for name in exported}
    rules = manifests()["PrometheusRule"]["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {
        "PodSweeperLagHigh",
        "PodSweeperNoLiveReplica",
        "PodSweeperLargeTransaction",
        "PodSweeperBacklogGrowing",
        "PodSweeperDeadRows",
        "PodSweeperRejectedRetires",
        "PodSweeperStuckClaim",
        "PodSweeperNotReady",
        "PodSweeperClusterUnswept",
        "PodSweeperNamespaceRefused",
        "PodSweeperBreakerTripped",
        "PodSweeperKubeUnreachable",
        "PodSweeperNoProgress",
        "PodSweeperPausedLong",
        "PodSweeperReplicationGuardHolding",
    }
    for rule in rules:
        for name in re.findall(r"pod_sweeper_[a-z_]+", rule["expr"]):
            assert name in exported, (rule["alert"], name)


def test_systemd_unit() -> None:
    unit = unit_file()
    assert unit["Type"] == ["notify"]
    assert unit["ExecStart"][0].endswith("pod-sweeper run")
    assert unit["Restart"] == ["on-failure"] and unit["WatchdogSec"] == ["30s"]
    assert unit["EnvironmentFile"] == ["/etc/pod-sweeper/pod-sweeper.env"]
    for key in ("DynamicUser", "NoNewPrivileges", "PrivateTmp", "ProtectHome", "RestrictNamespaces"):
        assert unit[key] == ["yes"], key
    assert unit["ProtectSystem"] == ["strict"]
    assert unit["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    assert unit["CapabilityBoundingSet"] == [""]
    stop = int(unit["TimeoutStopSec"][0].rstrip("s"))
    assert stop > Settings.model_fields["shutdown_timeout"].default
    assert unit["RestartPreventExitStatus"] == ["2 3"]
    assert unit["SyslogLevelPrefix"] == ["yes"] and unit["StandardError"] == ["journal"]


def test_example_environment_file_names_real_settings_and_shows_each_default_as_it_is() -> None:
    """The example sets only what an install must (the URL, the namespaces); the lines it shows
    commented are the settings' defaults, read back through the settings: copying it changes nothing."""
    known = {f"POD_SWEEPER_{name.upper()}": name for name in Settings.model_fields}
    lines = (ROOT / "systemd" / "pod-sweeper.env.example").read_text().splitlines()
    names = [line.split("=", 1)[0] for line in lines if line and not line.startswith("#")]
    assert set(names) == {"POD_SWEEPER_DATABASE_URL", "POD_SWEEPER_NAMESPACES"}
    shown = dict(line.removeprefix("# ").split("=", 1) for line in lines if re.match(r"# POD_SWEEPER_\w+=", line))
    assert shown and set(shown) <= set(known)
    for variable, value in shown.items():
        field = known[variable]
        parsed = getattr(Settings(database_url="host=x", **{field: value}), field)
        assert parsed == Settings.model_fields[field].default, (variable, value)
    assert "README" not in (ROOT / "systemd" / "pod-sweeper.env.example").read_text()


def test_the_monitor_the_budget_and_the_job_fit_the_deployment() -> None:
    docs = manifests()
    template = docs["Deployment"]["spec"]["template"]
    [container] = template["spec"]["containers"]
    pod_labels = template["metadata"]["labels"]
    monitor = docs["PodMonitor"]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= pod_labels.items()
    [endpoint] = monitor["podMetricsEndpoints"]
    assert endpoint["port"] in {p["name"] for p in container["ports"]} and endpoint["path"] == "/metrics"
    budget = docs["PodDisruptionBudget"]["spec"]
    assert budget["selector"]["matchLabels"].items() <= pod_labels.items()
    assert budget["minAvailable"] < docs["Deployment"]["spec"]["replicas"]
    [migrate] = docs["Job"]["spec"]["template"]["spec"]["containers"]
    assert migrate["image"] == container["image"] and migrate["args"] == ["migrate"]
    assert docs["Job"]["spec"]["template"]["metadata"]["labels"].items() & pod_labels.items() == set()  # not scraped


def test_the_migrate_job_is_safe_for_gitops_and_no_namespace_is_hard_coded_where_kustomize_cannot_move_it() -> None:
    docs = manifests()
    job = docs["Job"]
    annotations = job["metadata"]["annotations"]
    # Argo CD runs it before the sync, Helm before an install or upgrade; each replaces the last first.
    assert annotations["argocd.argoproj.io/hook"] == "PreSync"
    assert annotations["argocd.argoproj.io/hook-delete-policy"] == "BeforeHookCreation"
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation"
    # Not deleted by a TTL (a GitOps tool would re-create and re-run it every day), named once for all
    # releases (no version in its name).
    assert "ttlSecondsAfterFinished" not in job["spec"]
    assert not re.search(r"\d", job["metadata"]["name"])
    [container] = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_SWEEPER_NAMESPACES"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # A replica started before the hook has migrated, or before its role is granted, waits not ready
    # (saying why on /readyz) instead of crash-looping: a first install completes without restarts.
    assert env["POD_SWEEPER_ON_START_ERROR"]["value"] == "wait"


def test_the_role_grants_exactly_what_check_asks_for_with_every_namespaced_feature_on() -> None:
    """Least privilege both ways: every verb the Role grants is one the daemon uses (``check`` asks
    for it), and every one ``check`` asks for in the namespace is granted (nodes, cluster-wide, are a
    ClusterRole's, which deploy/ does not ship)."""
    from pod_sweeper.cli.check import needs
    from pod_sweeper.core.settings import Settings

    everything = Settings(
        database_url="host=x",
        events=True,
        reconcile_sandbox_label="sandbox",
        reconcile_generation_label="generation",
        reconcile_namespace="sandboxes",
    )
    asked = {(p.resource, p.verb) for p in needs(everything, ["sandboxes"]) if p.namespace is not None}
    role = manifests()["Role"]
    granted = {(resource, verb) for rule in role["rules"] for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted == asked


def _anchors(markdown: str) -> set[str]:
    """The anchors a Markdown renderer gives the headings (GitHub's rule: lower case, punctuation
    dropped, spaces to hyphens)."""
    headings = re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_alert_has_a_runbook_url_that_leads_to_its_own_heading() -> None:
    rules = manifests()["PrometheusRule"]["spec"]["groups"][0]["rules"]
    for rule in rules:
        url = rule["annotations"].get("runbook_url")
        assert url, rule["alert"]
        path, _, anchor = url.partition("#")
        target = ROOT / path
        assert target.is_file(), url
        assert anchor == rule["alert"].lower() and anchor in _anchors(target.read_text()), url
        assert "runbook" not in rule["annotations"]  # runbook_url, as Alertmanager templates and Grafana expect


def test_every_path_the_shipped_files_cite_exists() -> None:
    """The manifests, the unit and the env example cite docs, tests and queries by path: each must be
    there (the alerts once cited a README section and a test folder that had moved)."""
    cited = set()
    for path in [*(ROOT / "deploy").rglob("*"), *(ROOT / "systemd").glob("*")]:
        if path.is_file() and path.suffix not in (".json",):
            text = path.read_text()
            cited |= set(
                re.findall(r"\b((?:docs|tests|sql|deploy|migrations|tools)/[A-Za-z0-9_./-]*[A-Za-z0-9_])", text)
            )
    assert cited
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert missing == [], missing


def test_the_documented_build_names_the_base_by_digest_and_installs_from_the_lock() -> None:
    """docs/operations.md's build command pins the Containerfile's base (the same image) by digest, and
    builds the wheels from the lock with hashes required, as tests/containers.build_wheels does."""
    containerfile = (ROOT / "deploy" / "Containerfile").read_text()
    [base] = re.findall(r"^ARG BASE=(\S+)$", containerfile, re.M)
    ops = (ROOT / "docs" / "operations.md").read_text()
    section = ops[ops.index("### The image\n") : ops.index("### Install as a sidecar or a Deployment")]
    [pinned] = re.findall(r"--build-arg BASE=(\S+)", section)
    assert re.fullmatch(re.escape(base) + r"@sha256:[0-9a-f]{64}", pinned), pinned
    assert (
        "pip wheel --require-hashes --only-binary :all: --wheel-dir build/wheels -r deploy/requirements.lock" in section
    )
    assert "--require-hashes -r /build/requirements.lock" in containerfile
    ignored = (ROOT / ".containerignore").read_text().split()
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", containerfile, re.M)
    for path in " ".join(copied).split():
        assert f"!{path}" in ignored, path  # everything the build copies is let through, nothing else


def test_the_charts_alerts_are_the_kustomize_bases_byte_for_byte_and_no_link() -> None:
    """A chart reads nothing outside itself, and Helm reports every symbolic link it follows (a noise
    line on every command): deploy/chart/files holds a copy of the rules, which must not drift."""
    copy = ROOT / "deploy" / "chart" / "files" / "prometheusrule.yaml"
    original = ROOT / "deploy" / "monitoring" / "prometheusrule.yaml"
    assert not copy.is_symlink() and not original.is_symlink()
    assert copy.read_bytes() == original.read_bytes(), "cp deploy/monitoring/prometheusrule.yaml deploy/chart/files/"
    assert not [p for p in (ROOT / "deploy").rglob("*") if p.is_symlink()]
