"""Dry-run mode: the whole pipeline, fencing included, DELETE with dryRun=All, nothing deleted; rows end
``would_delete``, retention keeps them, and the next real run reopens and finishes them."""

from __future__ import annotations

from typing import Any

import psycopg

from helpers import DaemonThread, add_execution, outbox, run, settings_for, wait_until
from pod_sweeper.store import db
from pod_sweeper.store.sweep import retention


def test_dry_run_deletes_nothing_and_a_real_run_finishes(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    for i in range(10):
        add_execution(execs, kube, f"d{i}")
    add_execution(execs, kube, "gone")
    kube.remove_pod("sandboxes", "pod-gone-1")
    common = {"kubeconfig": kube.kubeconfig, "rate_limit_qps": 0, "poll_interval": 30}
    with DaemonThread(settings_for(db_url, dry_run=True, **common)):
        execs.execute("UPDATE executions SET active = false")
        wait_until(lambda: len(outbox(execs)) == 11 and all(r["status"] == "done" for r in outbox(execs)))
    outcomes = {r["sandbox_id"]: r["outcome"] for r in outbox(execs)}
    assert outcomes.pop("gone") == "absent"  # true in a dry run too
    assert set(outcomes.values()) == {"would_delete"}
    assert len(kube.pods) == 10  # nothing deleted
    assert all(d.body["dryRun"] == ["All"] and d.body["preconditions"]["uid"] for d in kube.deletes())

    execs.execute("UPDATE pod_sweeper.outbox SET done_at = '2000-01-01'")

    async def prune() -> int | None:
        async with db.connection(settings_for(db_url)) as conn:
            return await retention.prune(conn, retention_seconds=60)

    assert run(prune()) == 1  # only the absent row: would_delete rows are still work to do
    kube.requests.clear()
    with DaemonThread(settings_for(db_url, **common)):
        wait_until(lambda: {r["outcome"] for r in outbox(execs)} == {"deleted"}, what="the real run")
    assert kube.pods == {}
    assert all("dryRun" not in d.body for d in kube.deletes())


def test_a_shadow_namespace_is_swept_in_dry_run_beside_real_ones_until_it_leaves_the_list(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """POD_SWEEPER_DRY_RUN_NAMESPACES, a staged rollout: the listed namespace's rows end would_delete
    with nothing deleted while the others are swept for real; taken off the list, its rows are reopened
    at the next start and swept."""
    for i in range(3):
        add_execution(execs, kube, f"real{i}", namespace="live")
        add_execution(execs, kube, f"shadow{i}", namespace="staged")
    common = {"kubeconfig": kube.kubeconfig, "rate_limit_qps": 0, "poll_interval": 30}
    with DaemonThread(settings_for(db_url, dry_run_namespaces="staged", **common)):
        execs.execute("UPDATE executions SET active = false")
        wait_until(lambda: len(outbox(execs)) == 6 and all(r["status"] == "done" for r in outbox(execs)))
    outcomes = {r["sandbox_id"]: r["outcome"] for r in outbox(execs)}
    assert outcomes == {**{f"real{i}": "deleted" for i in range(3)}, **{f"shadow{i}": "would_delete" for i in range(3)}}
    assert sorted(ns for ns, _ in kube.pods) == ["staged"] * 3
    dry = [d for d in kube.deletes() if d.body.get("dryRun") == ["All"]]
    assert len(dry) == 3 and all("/namespaces/staged/" in d.path for d in dry)

    with DaemonThread(settings_for(db_url, dry_run_namespaces="staged", **common)):  # still listed: kept
        pass
    assert {r["outcome"] for r in outbox(execs) if r["pod_namespace"] == "staged"} == {"would_delete"}
    with DaemonThread(settings_for(db_url, **common)):
        wait_until(lambda: all(r["outcome"] == "deleted" for r in outbox(execs)), what="the staged rows swept")
    assert not kube.pods
