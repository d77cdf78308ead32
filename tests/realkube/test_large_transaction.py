"""The breaker's transaction rule on the real API server: one host transaction retiring a workspace of
600 sandboxes is kept back as one batch (not a DELETE reaches its pods, none of its rows charged) while
single retires in other namespaces of the same cluster are deleted; the on-call's release (previewed
first) lets it go, and every one of its pods is deleted then."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from harness.kubeapiserver import KubeApiServer
from helpers import DaemonThread, cli, daemon_settings, wait_until
from realkube.test_controls import living, pods


def test_a_600_row_transaction_is_held_while_other_namespaces_sweep_then_released(
    kube_apiserver: KubeApiServer, execs: psycopg.Connection[Any], db_url: str
) -> None:
    workspace = kube_apiserver.namespace(f"workspace-{uuid.uuid4().hex[:6]}")
    tenants = [kube_apiserver.namespace(f"tenant{i}-{uuid.uuid4().hex[:6]}") for i in range(2)]
    pods(kube_apiserver, execs, workspace, 600, "w")
    for tenant in tenants:
        pods(kube_apiserver, execs, tenant, 3, "t")
    settings = daemon_settings(db_url, kube_apiserver.admin_kubeconfig, breaker_transaction_rows=500)
    with DaemonThread(settings) as replica:
        # The platform deletes one customer's workspace in one transaction.
        execs.execute("UPDATE executions SET active = false WHERE pod_namespace = %s", (workspace,))
        wait_until(
            lambda: execs.execute("SELECT count(*) AS n FROM pod_sweeper.large_transactions").fetchone()["n"] == 1,
            timeout=30,
            what="the transaction to be kept back",
        )
        for tenant in tenants:  # other tenants' retires, one a transaction, after it
            for name in ("t0", "t1", "t2"):
                execs.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (f"{tenant}-{name}",))
        for tenant in tenants:
            wait_until(lambda t=tenant: not living(kube_apiserver, t), timeout=30, what=f"{tenant} swept")
        assert len(living(kube_apiserver, workspace)) == 600  # not one DELETE reached the workspace
        assert replica.daemon.ready and replica.daemon.sweeper.status.breaker is None
        waiting = execs.execute(
            "SELECT count(*) AS n, max(attempts) AS tries FROM pod_sweeper.outbox WHERE pod_namespace = %s"
            " AND status = 'pending'",
            (workspace,),
        ).fetchone()
        assert (waiting["n"], waiting["tries"]) == (600, 0)
        shown = cli("status", url=db_url).stdout
        assert shown.startswith("LARGE TRANSACTION KEPT BACK (cluster default), id ") and "600 open row(s)" in shown
        said = cli("explain", f"{workspace}/w7", url=db_url).stdout
        assert "waits [large_transaction]" in said, said
        [large] = execs.execute("SELECT id FROM pod_sweeper.large_transactions").fetchall()
        preview = cli("release-transaction", str(large["id"]), url=db_url)
        assert preview.returncode == 0 and "nothing changed" in preview.stdout, preview.stdout + preview.stderr
        assert len(living(kube_apiserver, workspace)) == 600
        released = cli("release-transaction", str(large["id"]), "--yes", url=db_url)
        assert released.returncode == 0, released.stderr
        wait_until(lambda: not living(kube_apiserver, workspace), timeout=120, what="the workspace swept")
