"""A namespace deleted while its rows are pending or in flight: the namespace controller deletes its pods
(the emulated kubelets end them) and finalizes it; every row ends with a clear outcome, and an Event
refused because the namespace is terminating neither closes the namespace's gate nor charges the row."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from harness.kubecluster import KubeCluster
from helpers import DaemonThread, daemon_settings, record_pod, retire, wait_until


def test_a_namespace_deleted_under_its_rows_ends_each_row_clearly(
    kube_cluster: KubeCluster, execs: psycopg.Connection[Any], db_url: str, fast_confirmation: None
) -> None:
    cluster = kube_cluster
    ns = cluster.namespace(f"doomed-{uuid.uuid4().hex[:6]}")
    cluster.add_node()
    names = [f"p{i}" for i in range(8)]
    for name in names:
        record_pod(execs, cluster.pod(ns, name, grace=2), name)
    for name in names:
        cluster.wait_phase(ns, name, "Running")
    settings = daemon_settings(db_url, cluster.admin_kubeconfig, events=True)
    with DaemonThread(settings) as daemon:
        for name in names[:4]:
            retire(execs, name)  # some pending or in flight when the namespace goes
        status, answer = cluster.request("DELETE", f"/api/v1/namespaces/{ns}")
        assert status == 200, answer
        for name in names[4:]:
            retire(execs, name)  # some retired while it is terminating
        finished = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status IN ('done', 'dead')"
        wait_until(lambda: execs.execute(finished).fetchone()["n"] == len(names), timeout=60, what="every row ended")
        wait_until(
            lambda: cluster.request("GET", f"/api/v1/namespaces/{ns}")[0] == 404,
            timeout=90,
            what="the namespace controller to finalize the namespace",
        )
        metrics = daemon.daemon.metrics
        assert daemon.daemon.ready
        assert metrics.value("pod_sweeper_namespace_refused", pod_namespace=ns) == 0  # an Event's 403 is no refusal
    events = {r: metrics.value("pod_sweeper_events_total", result=r) for r in ("sent", "failed", "dropped")}
    rows = execs.execute("SELECT status, outcome, attempts, last_error FROM pod_sweeper.outbox").fetchall()
    assert {r["status"] for r in rows} == {"done"}
    assert {r["outcome"] for r in rows} <= {"deleted", "absent"}  # gone by our DELETE, or already
    assert {(r["attempts"], r["last_error"]) for r in rows} == {(1, None)}  # nothing charged twice
    deleted = sum(1 for r in rows if r["outcome"] == "deleted")
    print(f"{deleted} deleted, {len(rows) - deleted} already absent; Events {events}")
    assert events["sent"] + events["failed"] + events["dropped"] == deleted
