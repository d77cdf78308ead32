"""The shipped Grafana dashboard: every panel's query names only metrics the daemon exports, and, asked
of a real Prometheus that scraped a real daemon through a short sweep, every one parses and returns
data."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg

from harness.postgres import free_port
from helpers import DaemonThread, daemon_settings, seed_executions, wait_until
from operator_tier.prometheus import Prometheus
from operator_tier.tools import require
from pod_sweeper.core.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
# What Grafana substitutes before it sends a query; the sweep below is scraped every second.
GRAFANA_VARIABLES = {"$__rate_interval": "1m"}


def panel_queries() -> dict[str, str]:
    board = json.loads(DASHBOARD.read_text())
    queries = {}
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(name, value)
            queries[f"{panel['title']} {target['refId']}"] = expr
    return queries


def test_every_panel_names_only_exported_metrics() -> None:
    exported: set[str] = set()
    for family in Metrics().registry.collect():
        # A gauge labelled by data (a cluster) has no sample until it sees one: its family counts.
        exported |= {sample.name for sample in family.samples} | {family.name}
    for title, expr in panel_queries().items():
        names = set(re.findall(r"\bpod_sweeper_[a-z_]+", expr))
        assert names and names <= exported, (title, names - exported)


def test_every_panel_returns_data_from_a_real_prometheus_after_a_sweep(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    binary = require("prometheus", "prometheus")
    seed_executions(execs, kube, 40)
    port = free_port()
    settings = daemon_settings(db_url, kube, http_port=port, http_host="127.0.0.1")
    with DaemonThread(settings), Prometheus(binary, port) as prometheus:
        wait_until(lambda: prometheus.query("up == 1"), timeout=30, what="prometheus scraping the daemon")
        execs.execute("UPDATE executions SET active = false")
        done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done'"
        wait_until(lambda: execs.execute(done).fetchone()["n"] == 40, timeout=30, what="the sweep done")
        queries = panel_queries()
        empty = dict(queries)

        def all_answered() -> bool:
            for title in list(empty):
                if prometheus.query(empty[title]):
                    del empty[title]
            return not empty

        wait_until(all_answered, timeout=30, interval=0.5, what=f"data for every panel (still empty: {empty})")
        # What Prometheus holds is what the daemon counted, once a scrape after the last delete is in.
        total = 'sum(pod_sweeper_outcomes_total{outcome="deleted"}) == 40'
        wait_until(lambda: prometheus.query(total), timeout=30, interval=0.5, what="40 deletes scraped")
