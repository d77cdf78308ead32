"""The PrometheusRule checked by promtool: the rules parse, each alert fires when it should page and
stays silent when it should not (``alerts.test.yaml``), and the series those cases feed in are the ones
a freshly started daemon really exports."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import yaml

from harness.postgres import free_port
from helpers import DaemonThread, daemon_settings, http_get, wait_until
from operator_tier.tools import TARGET_LABELS, require

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("alerts.test.yaml")


def rules_file(folder: Path) -> Path:
    """The PrometheusRule's groups as a plain rules file, which promtool reads."""
    rule = yaml.safe_load((ROOT / "deploy" / "monitoring" / "prometheusrule.yaml").read_text())
    path = folder / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def test_promtool_checks_the_rules_and_runs_their_unit_tests(tmp_path: Path) -> None:
    promtool = require("promtool", "prometheus")
    rules = rules_file(tmp_path)
    checked = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (tmp_path / CASES.name).write_text(CASES.read_text())
    tested = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / CASES.name)], capture_output=True, text=True, check=False
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def series(text: str) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    found = set()
    for line in text.splitlines():
        if (match := _SAMPLE.match(line)) is not None:
            found.add((match[1], frozenset(_LABEL.findall(match[2] or ""))))
    return found


def test_the_cases_feed_the_series_a_fresh_daemon_exports(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    port = free_port()
    with DaemonThread(daemon_settings(db_url, kube, http_port=port, http_host="127.0.0.1")):
        live_text = http_get(port, "/metrics")[1]
    live = series(live_text)
    cases = yaml.safe_load(CASES.read_text())["tests"]
    fed = {
        (name, frozenset((k, v) for k, v in labels if k not in TARGET_LABELS))
        for case in cases
        for entry in case["input_series"]
        for name, labels in series(entry["series"] + " 0")
        if name != "up"  # Prometheus's own, for the case where nothing is scraped
    }
    assert fed, "the cases feed no series"
    # A series labelled by a namespace of the outbox's exists only once that namespace was refused: its
    # metric family must exist from the start (HELP and TYPE), and its only label be that namespace.
    by_data = {(name, labels) for name, labels in fed if any(k in ("pod_namespace", "pod_cluster") for k, _ in labels)}
    # pod_sweeper_build_info{version, pod_cluster}: the replica's own cluster, which alerts on its series join.
    shapes = ({"pod_namespace"}, {"pod_cluster"}, {"pod_cluster", "pod_namespace"}, {"pod_cluster", "version"})
    assert all({k for k, _ in labels} in shapes for _, labels in by_data)
    assert {name for name, _ in by_data} <= {
        line.split()[2] for line in live_text.splitlines() if line.startswith("# TYPE")
    }
    missing = sorted((name, sorted(labels)) for name, labels in fed - by_data - live)
    assert missing == [], f"series the cases use that a fresh daemon does not export: {missing}"
    promtool = require("promtool", "prometheus")
    linted = subprocess.run([promtool, "check", "metrics"], input=live_text, capture_output=True, text=True)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_a_poll_only_replica_exports_no_listener_health(db_url: str, execs: psycopg.Connection[Any], kube: Any) -> None:
    port = free_port()
    with DaemonThread(daemon_settings(db_url, kube, http_port=port, http_host="127.0.0.1", listen=False)):

        def when_ready() -> str | None:
            text = http_get(port, "/metrics")[1]
            return text if "pod_sweeper_ready 1.0" in text else None

        text = wait_until(when_ready, what="pod_sweeper_ready 1")
    assert "pod_sweeper_listener_healthy" not in text
    assert 'pod_sweeper_outcomes_total{outcome="deleted"} 0.0' in text
