"""An on-call's controls end to end on the real API server: a pause of one namespace under a running
burst (no DELETE reaches its pods once `pause --wait` returns, the other namespace drains on), a hold
through a restart, and a discard previewed then done, with the pods that stay really staying."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from conformance.apiserver import core_api, manifest
from harness.kubeapiserver import KubeApiServer
from helpers import DaemonThread, cli, daemon_settings, retire, row_for, wait_until


def pods(server: KubeApiServer, execs: psycopg.Connection[Any], namespace: str, n: int, prefix: str) -> list[str]:
    core = core_api(server.admin_kubeconfig)
    names = [f"{prefix}{i}" for i in range(n)]
    for name in names:
        pod = core.create_namespaced_pod(namespace, manifest(name))
        execs.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
            " VALUES (%s, 1, %s, %s, %s, true)",
            (f"{namespace}-{name}", namespace, name, uuid.UUID(pod.metadata.uid)),
        )
    return names


def living(server: KubeApiServer, namespace: str) -> set[str]:
    """Pods of the namespace the server holds and has not begun to delete."""
    items = core_api(server.admin_kubeconfig).list_namespaced_pod(namespace).items
    return {p.metadata.name for p in items if p.metadata.deletion_timestamp is None}


def test_a_pause_of_one_namespace_under_a_burst_stops_its_deletes_and_no_others(
    kube_apiserver: KubeApiServer, execs: psycopg.Connection[Any], db_url: str
) -> None:
    paused = kube_apiserver.namespace(f"paused-{uuid.uuid4().hex[:6]}")
    other = kube_apiserver.namespace(f"other-{uuid.uuid4().hex[:6]}")
    pods(kube_apiserver, execs, paused, 60, "p")
    pods(kube_apiserver, execs, other, 60, "o")
    # 10 DELETEs a second, claims of 5: the burst of 120 lasts about 12 s, the pause lands inside it, and
    # only the few rows claimed before it may still go.
    settings = daemon_settings(
        db_url, kube_apiserver.admin_kubeconfig, rate_limit_qps=10, rate_limit_burst=2, batch_size=5, concurrency=2
    )
    with DaemonThread(settings):
        execs.execute("UPDATE executions SET active = false")
        wait_until(lambda: len(living(kube_apiserver, paused)) < 60, what="the burst under way in the namespace")
        result = cli("pause", "--namespace", paused, "--reason", "incident", "--wait", url=db_url)
        assert result.returncode == 0, result.stdout + result.stderr
        left = living(kube_apiserver, paused)
        assert left, "the burst ended before the pause: nothing left to hold"
        wait_until(lambda: not living(kube_apiserver, other), timeout=30, what="the other namespace drained")
        assert living(kube_apiserver, paused) == left  # not one DELETE there after the pause returned
        pending = execs.execute(
            "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE pod_namespace = %s AND status = 'pending'", (paused,)
        ).fetchone()["n"]
        assert pending == len(left)
        assert cli("unpause", "--namespace", paused, url=db_url).returncode == 0
        wait_until(lambda: not living(kube_apiserver, paused), timeout=30, what="the paused namespace drained")


def test_a_held_pod_survives_a_restart_and_a_discard_is_previewed_then_done(
    kube_apiserver: KubeApiServer, execs: psycopg.Connection[Any], db_url: str
) -> None:
    ns = kube_apiserver.namespace(f"held-{uuid.uuid4().hex[:6]}")
    pods(kube_apiserver, execs, ns, 4, "h")
    held = cli("hold", f"{ns}/h0", "--reason", "forensics", url=db_url)
    assert held.returncode == 0, held.stderr
    settings = daemon_settings(db_url, kube_apiserver.admin_kubeconfig)
    with DaemonThread(settings):
        retire(execs, f"{ns}-h0")
        retire(execs, f"{ns}-h1")
        wait_until(lambda: living(kube_apiserver, ns) == {"h0", "h2", "h3"}, what="h1 deleted, h0 held")
    with DaemonThread(settings):  # a restart: the hold is in the database
        retire(execs, f"{ns}-h2")
        wait_until(lambda: living(kube_apiserver, ns) == {"h0", "h3"}, what="h2 deleted, h0 still held")
    assert (row_for(execs, f"{ns}-h0") or {}).get("attempts") == 0
    # A mistake found: h0 should never go. Discard its row (previewed first), then release the hold.
    preview = cli("discard", "--namespace", ns, "--status", "pending", "--dry-run", "--reason", "kept", url=db_url)
    assert preview.stdout.startswith("would discard 1 row(s) in cluster default; nothing changed")
    assert f"{ns}/h0" in preview.stdout
    assert (row_for(execs, f"{ns}-h0") or {}).get("status") == "pending"
    done = cli("discard", "--namespace", ns, "--status", "pending", "--reason", "kept", url=db_url)
    assert done.returncode == 0 and done.stdout.startswith("discarded 1 row(s)")
    assert cli("release", f"{ns}/h0", url=db_url).returncode == 0
    with DaemonThread(settings):
        retire(execs, f"{ns}-h3")
        wait_until(lambda: living(kube_apiserver, ns) == {"h0"}, what="h3 deleted; h0 never")
    assert (row_for(execs, f"{ns}-h0") or {}).get("outcome") == "discarded"


def test_a_shadow_namespace_is_validated_by_the_real_server_and_nothing_in_it_deleted(
    kube_apiserver: KubeApiServer, execs: psycopg.Connection[Any], db_url: str
) -> None:
    staged = kube_apiserver.namespace(f"staged-{uuid.uuid4().hex[:6]}")
    live = kube_apiserver.namespace(f"live-{uuid.uuid4().hex[:6]}")
    pods(kube_apiserver, execs, staged, 3, "s")
    pods(kube_apiserver, execs, live, 3, "l")
    settings = daemon_settings(db_url, kube_apiserver.admin_kubeconfig, dry_run_namespaces=staged)
    finished = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done'"
    with DaemonThread(settings):
        execs.execute("UPDATE executions SET active = false")
        wait_until(lambda: execs.execute(finished).fetchone()["n"] == 6, what="six rows done")
    outcomes = execs.execute(
        "SELECT pod_namespace, outcome, count(*) AS n FROM pod_sweeper.outbox GROUP BY 1, 2 ORDER BY 1"
    ).fetchall()
    assert {(r["pod_namespace"], r["outcome"], r["n"]) for r in outcomes} == {
        (live, "deleted", 3),
        (staged, "would_delete", 3),
    }
    assert living(kube_apiserver, staged) == {"s0", "s1", "s2"} and not living(kube_apiserver, live)
    with DaemonThread(settings.model_copy(update={"dry_run_namespaces": None})):  # the rollout goes on
        wait_until(lambda: not living(kube_apiserver, staged), what="the staged namespace swept for real")
