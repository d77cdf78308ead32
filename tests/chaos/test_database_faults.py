"""Database faults mid-drain, on a throwaway cluster the test owns: a server restart, and every
sweeper backend killed with pg_terminate_backend. The daemon reconnects with backoff and every row
still ends done, with no pod deleted twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from harness.postgres import ThrowawayCluster
from helpers import DaemonThread, attach_table, create_executions, run, seed_executions, settings_for, wait_until
from pod_sweeper.store import db
from pod_sweeper.store.schema import migrations

pytestmark = pytest.mark.slow

ROWS = 400


@pytest.fixture
def cluster() -> Iterator[ThrowawayCluster]:
    with ThrowawayCluster() as pg:
        yield pg


@pytest.fixture
def seeded(cluster: ThrowawayCluster, kube: Any) -> str:
    url = cluster.url("postgres")

    async def migrate() -> None:
        async with db.connection(settings_for(url)) as conn:
            await migrations.migrate(conn)

    run(migrate())
    with psycopg.connect(url, autocommit=True) as conn:
        create_executions(conn)
        run(attach_table(url))
        seed_executions(conn, kube, ROWS)
    return url


def settings(url: str, kube: Any) -> Any:
    return settings_for(
        url,
        kubeconfig=kube.kubeconfig,
        lease_seconds=5,
        request_timeout=2,
        poll_interval=0.5,
        backoff_base=0.1,
        backoff_max=0.5,
        rate_limit_qps=0,
        concurrency=8,
        batch_size=20,
        max_attempts=20,
        connect_timeout=2,
    )


def done(url: str) -> int:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            row = conn.execute("SELECT count(*) FROM pod_sweeper.outbox WHERE status = 'done'").fetchone()
            return int(row[0]) if row else 0
    except psycopg.OperationalError:
        return -1


def assert_every_row_done_once(url: str, kube: Any, label: str) -> None:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT outcome, count(*) AS n FROM pod_sweeper.outbox GROUP BY 1").fetchall()
        deleted = sum(r["n"] for r in rows if r["outcome"] == "deleted")
        terminal = conn.execute(
            "SELECT count(*) AS n FROM (SELECT outbox_id FROM pod_sweeper.attempts WHERE recorded"
            " AND result IN ('deleted', 'absent', 'replaced', 'dead') GROUP BY 1 HAVING count(*) > 1) twice"
        ).fetchone()
    print(
        f"\nchaos {label}: rows {sum(r['n'] for r in rows)}, outcomes { {r['outcome']: r['n'] for r in rows} }, "
        f"deletes seen {len(kube.deletes())}"
    )
    assert terminal is not None and terminal["n"] == 0  # no row recorded twice
    assert {r["outcome"] for r in rows} <= {"deleted", "absent"}, rows
    accepted = Counter(d.path for d in kube.deletes() if d.status == 200)
    assert max(accepted.values()) == 1  # no pod was deleted twice
    assert len(accepted) == ROWS and kube.pods == {}
    # A 200 whose result was lost with the connection is repeated by the next claim and ends absent.
    assert deleted <= ROWS


def test_server_restart_mid_drain(cluster: ThrowawayCluster, seeded: str, kube: Any) -> None:
    kube.inject("delay", method="DELETE", seconds=0.01, times=None)
    with DaemonThread(settings(seeded, kube)) as daemon, psycopg.connect(seeded, autocommit=True) as conn:
        conn.execute("UPDATE executions SET active = false")
        conn.close()
        wait_until(lambda: done(seeded) >= 50, timeout=30, what="the drain to be under way")
        cluster.restart(mode="fast")
        wait_until(lambda: done(seeded) == ROWS, timeout=60, what="every row done after the restart")
        value = daemon.daemon.metrics.value
        assert value("pod_sweeper_db_errors_total") >= 1 or value("pod_sweeper_listener_reconnects_total") >= 1
    assert_every_row_done_once(seeded, kube, "database restart mid-drain")


def test_every_sweeper_backend_terminated(seeded: str, kube: Any) -> None:
    kube.inject("delay", method="DELETE", seconds=0.01, times=None)
    with DaemonThread(settings(seeded, kube)) as daemon, psycopg.connect(seeded, autocommit=True) as conn:
        conn.execute("UPDATE executions SET active = false")
        wait_until(lambda: done(seeded) >= 50, timeout=30, what="the drain to be under way")
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name LIKE 'pod-sweeper%%' AND pid <> pg_backend_pid()"
        ).fetchone()
        assert killed is not None and killed[0] >= 2
        wait_until(lambda: done(seeded) == ROWS, timeout=60, what="every row done after the kills")
        wait_until(lambda: daemon.daemon.listener.healthy, what="the listener to reconnect")
    assert_every_row_done_once(seeded, kube, "every sweeper backend terminated")
