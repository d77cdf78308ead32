"""The real kube-apiserver stopped for longer than the whole attempt budget and started again (etcd and
its data stay, as in a control-plane upgrade): no row dies of it, nothing but probes go out while it is
down, and every retired pod is deleted once it is back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conformance.apiserver import core_api, manifest
from harness.kubeapiserver import KubeApiServer
from helpers import DaemonThread, daemon_settings, retire, wait_until
from pod_sweeper.core.backoff import retry_span


@pytest.fixture(scope="module")
def restartable(kube_apiserver: KubeApiServer) -> Iterator[KubeApiServer]:
    """A server of this module's own: stopping it must not take the session's away from other tests."""
    with KubeApiServer(kube_apiserver.bindir) as server:
        yield server


def test_the_api_server_stopped_longer_than_the_attempt_budget_kills_no_row(
    restartable: KubeApiServer, execs: psycopg.Connection[Any], db_url: str
) -> None:
    server = restartable
    ns = server.namespace(f"outage-{uuid.uuid4().hex[:6]}")
    core = core_api(server.admin_kubeconfig)
    names = [f"p{i}" for i in range(8)]
    for name in names:
        pod = core.create_namespaced_pod(ns, manifest(name))
        execs.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
            " VALUES (%s, 1, %s, %s, %s, true)",
            (name, ns, name, uuid.UUID(pod.metadata.uid)),
        )
    settings = daemon_settings(
        db_url, server.admin_kubeconfig, max_attempts=3, backoff_base=0.2, backoff_max=1.0, request_timeout=2.0
    )
    budget = retry_span(settings.backoff_base, settings.backoff_max, settings.max_attempts).longest
    with DaemonThread(settings) as daemon:
        server.stop_apiserver()  # connections refused from now on
        for name in names:
            retire(execs, name)
        wait_until(lambda: not daemon.daemon.ready, timeout=20, what="readiness to follow the outage")
        assert "the Kubernetes API server cannot be reached" in daemon.daemon.health.readiness()[1]
        assert daemon.daemon.metrics.value("pod_sweeper_kube_unreachable", pod_cluster="default") == 1
        outages = "SELECT count(*) AS n, min(since) AS since FROM pod_sweeper.outages"
        wait_until(lambda: execs.execute(outages).fetchone()["n"] == 1, what="the outage recorded")
        age = "SELECT extract(epoch FROM now() - min(since)) AS s FROM pod_sweeper.outages"
        wait_until(lambda: execs.execute(age).fetchone()["s"] > 4 * budget, timeout=30, what="down for 4 budgets")
        dead = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'dead'"
        assert execs.execute(dead).fetchone()["n"] == 0
        assert not daemon.daemon.ready
        server.start_apiserver()
        done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done' AND outcome = 'deleted'"
        wait_until(lambda: execs.execute(done).fetchone()["n"] == len(names), timeout=60, what="every pod deleted")
        wait_until(lambda: daemon.daemon.ready, timeout=20, what="ready again")
        wait_until(lambda: execs.execute(outages).fetchone()["n"] == 0, what="the outage row cleared")
    rows = execs.execute("SELECT status, attempts, last_error FROM pod_sweeper.outbox").fetchall()
    assert {(r["status"], r["attempts"], r["last_error"]) for r in rows} == {("done", 1, None)}
    assert core.list_namespaced_pod(ns).items == []
