"""``backfill``: retirements that predate ``attach`` are enqueued once, and then swept."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from helpers import DaemonThread, add_execution, attach_table, create_executions, outbox, run, settings_for, wait_until
from pod_sweeper.store import db
from pod_sweeper.store.admin import backfill

pytestmark = pytest.mark.versions


async def _backfill(url: str, **kwargs: Any) -> list[backfill.BackfillResult]:
    async with db.connection(settings_for(url)) as conn:
        return await backfill.backfill(conn, **kwargs)


def test_backfill_enqueues_old_retirements_once_and_the_daemon_sweeps_them(
    pg: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    create_executions(pg)
    for i in range(25):
        add_execution(pg, kube, f"old{i}")
    add_execution(pg, kube, "active")
    pg.execute("INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name) VALUES ('nouid', 1, 'n', 'p')")
    pg.execute("UPDATE executions SET active = false WHERE sandbox_id <> 'active'")  # before attach: no trigger
    run(attach_table(db_url))
    assert outbox(pg) == []

    [dry] = run(_backfill(db_url, dry_run=True))
    assert (dry.seen, dry.enqueued, len(dry.sample)) == (25, 25, 20)  # what a real run would do, rolled back
    assert outbox(pg) == []

    [first] = run(_backfill(db_url))
    assert (first.seen, first.enqueued) == (25, 25)
    assert {r["reason"] for r in outbox(pg)} == {"backfill"}
    [again] = run(_backfill(db_url))
    assert (again.seen, again.enqueued) == (0, 0)  # idempotent

    with DaemonThread(settings_for(db_url, kubeconfig=kube.kubeconfig, rate_limit_qps=0)):
        wait_until(lambda: all(r["status"] == "done" for r in outbox(pg)) and len(outbox(pg)) == 25)
    assert {r["outcome"] for r in outbox(pg)} == {"deleted"}
    assert kube.get_pod("sandboxes", "pod-active-1") is not None
