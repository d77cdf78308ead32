"""Confirmed deletion: a pod left terminating is looked at again after its grace period; one that
stays is reported stuck, and force-deleted only when allowed and its node is gone."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from helpers import DaemonThread, row_for, run, settings_for, wait_until
from pod_sweeper.cli import status_text
from pod_sweeper.store import db
from pod_sweeper.store.reads import status
from pod_sweeper.store.sweep import terminating
from pod_sweeper.tasks.loops import confirmer
from pod_sweeper.tasks.loops.confirmer import RECHECK_SECONDS


def add_scheduled(conn: psycopg.Connection[Any], kube: Any, sid: str, node: str, grace: int = 1) -> str:
    pod = kube.create_pod("sandboxes", sid, node_name=node, phase="Running", grace_period=grace)
    conn.execute(
        "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
        " VALUES (%s, 1, 'sandboxes', %s, %s)",
        (sid, sid, pod["metadata"]["uid"]),
    )
    return str(pod["metadata"]["uid"])


def settings(db_url: str, kube: Any, **overrides: Any) -> Any:
    return settings_for(db_url, kubeconfig=kube.kubeconfig, rate_limit_qps=0, poll_interval=0.5, **overrides)


def test_immediate_delete_is_confirmed_by_its_answer(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    pod = kube.create_pod("sandboxes", "now")  # unscheduled: removed at once
    execs.execute(
        "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " VALUES ('now', 1, 'sandboxes', 'now', %s, false)",
        (pod["metadata"]["uid"],),
    )
    with DaemonThread(settings(db_url, kube)):
        row = wait_until(lambda: (r := row_for(execs, "now")) and r["status"] == "done" and r)
    assert row["confirmed_at"] is not None and row["confirm_after"] is None
    assert [r.method for r in kube.api_calls()] == ["DELETE"]  # no extra GET


def test_terminating_pod_is_confirmed_once_it_is_gone(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_scheduled(execs, kube, "t", "node-1")
    kube.nodes.add("node-1")
    with DaemonThread(settings(db_url, kube)) as daemon:
        execs.execute("UPDATE executions SET active = false")
        row = wait_until(lambda: (r := row_for(execs, "t")) and r["status"] == "done" and r)
        assert row["outcome"] == "deleted" and row["confirm_after"] is not None and row["confirmed_at"] is None
        kube.remove_pod("sandboxes", "t")  # the kubelet finished
        wait_until(lambda: row_for(execs, "t")["confirmed_at"] is not None, timeout=20, what="confirmation")
        assert daemon.daemon.metrics.value("pod_sweeper_confirmed_gone_total") == 1
    assert any(r.method == "GET" and r.path.endswith("/pods/t") for r in kube.requests)


def test_stuck_pod_is_reported_and_never_forced_while_its_node_lives(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    uid = add_scheduled(execs, kube, "s", "node-1")
    kube.nodes.add("node-1")
    with DaemonThread(settings(db_url, kube, stuck_terminating_seconds=1, force_stuck=True)) as daemon:
        execs.execute("UPDATE executions SET active = false")
        wait_until(lambda: (row_for(execs, "s") or {}).get("stuck_at") is not None, timeout=20, what="stuck")
        assert daemon.daemon.metrics.value("pod_sweeper_stuck_terminating_total") == 1
    pod = kube.get_pod("sandboxes", "s")
    assert pod is not None and pod["metadata"]["uid"] == uid  # its node is alive: never forced

    async def read() -> Any:
        async with db.connection(settings_for(db_url)) as conn:
            return await status.read_status(conn)

    assert "pods still terminating past the limit" in status_text.render_text(run(read()))
    assert all(d.body.get("gracePeriodSeconds") != 0 for d in kube.deletes())


def test_stuck_pod_on_a_vanished_node_is_forced_only_when_allowed(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_scheduled(execs, kube, "a", "gone-node")
    add_scheduled(execs, kube, "b", "gone-node")
    with DaemonThread(settings(db_url, kube, stuck_terminating_seconds=1, force_stuck=False)):
        execs.execute("UPDATE executions SET active = false WHERE sandbox_id = 'a'")
        wait_until(lambda: (row_for(execs, "a") or {}).get("stuck_at") is not None, timeout=20, what="stuck")
    assert kube.get_pod("sandboxes", "a") is not None  # FORCE_STUCK off: reported, never forced
    with DaemonThread(settings(db_url, kube, stuck_terminating_seconds=1, force_stuck=True)) as daemon:
        execs.execute("UPDATE executions SET active = false WHERE sandbox_id = 'b'")
        # 'a' was looked at (stuck) just before this daemon started: its next look is RECHECK_SECONDS
        # later, then up to one confirmer interval more.
        wait_until(
            lambda: kube.get_pod("sandboxes", "b") is None and kube.get_pod("sandboxes", "a") is None,
            timeout=RECHECK_SECONDS + 20,
            what="the forced deletes",
        )
        wait_until(lambda: row_for(execs, "b")["confirmed_at"] is not None, timeout=20)
        assert daemon.daemon.metrics.value("pod_sweeper_force_deleted_total") >= 1
    forced = [d for d in kube.deletes() if d.body.get("gracePeriodSeconds") == 0]
    assert forced and all(d.body["preconditions"]["uid"] for d in forced)  # still fenced by the UID


def test_a_stuck_pod_outside_the_namespace_scope_is_never_forced(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleted under a wider scope, looked at again under a narrower one: reported, not forced."""
    monkeypatch.setattr(confirmer, "RECHECK_SECONDS", 0.5)  # the next look soon
    add_scheduled(execs, kube, "a", "gone-node")
    with DaemonThread(settings(db_url, kube, stuck_terminating_seconds=1)):
        execs.execute("UPDATE executions SET active = false")
        wait_until(lambda: (row_for(execs, "a") or {}).get("stuck_at") is not None, timeout=20, what="stuck")
    narrowed = settings(db_url, kube, stuck_terminating_seconds=1, force_stuck=True, namespaces="elsewhere")
    with DaemonThread(narrowed):
        seen = len(kube.requests)
        wait_until(
            lambda: any(r.method == "GET" and r.path.endswith("/pods/a") for r in kube.requests[seen:]),
            timeout=20,
            what="the next look at the stuck pod",
        )
    assert kube.get_pod("sandboxes", "a") is not None
    assert not [d for d in kube.deletes() if d.body.get("gracePeriodSeconds") == 0]


def test_a_rows_age_comes_from_the_databases_clock(execs: psycopg.Connection[Any], db_url: str) -> None:
    """sql/confirm_claim.sql gives each row's age since its DELETE was recorded on the database's clock
    (``now() - done_at``), which is what the confirmer judges a pod stuck by, whatever the replica's wall
    clock says: a done_at an hour behind the database's now is an hour old, one ahead of it is not old."""
    for sid in ("old", "ahead"):
        execs.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
            " VALUES (%s, 1, 'sandboxes', %s, gen_random_uuid(), false)",
            (sid, sid),
        )
    execs.execute(
        "UPDATE pod_sweeper.outbox SET status = 'done', outcome = 'deleted', confirm_after = now(),"
        " done_at = now() + CASE sandbox_id WHEN 'old' THEN interval '-1 hour' ELSE interval '1 hour' END"
    )

    async def take() -> list[terminating.Terminating]:
        async with db.connection(settings_for(db_url)) as conn:
            return await terminating.take_due(
                conn, cluster=settings_for(db_url).cluster, batch=10, recheck_seconds=RECHECK_SECONDS
            )

    ages = {row.pod_name: row.age_seconds for row in run(take())}
    assert 3600 <= ages["old"] < 3600 + 60
    assert -3600 <= ages["ahead"] < -3600 + 60
    assert run(take()) == []  # each taken once: its next look is RECHECK_SECONDS away
