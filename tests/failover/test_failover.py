"""HA failover as Patroni or CloudNativePG do it: a primary with a synchronous streaming standby (built
with ``pg_basebackup -R``), the daemon on a multi-host URL with ``target_session_attrs=read-write``, the
primary stopped with ``-m immediate`` mid-drain and the standby promoted. Every retired pod must be
deleted, no active pod touched, and the daemon ready again on the new primary."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from harness.postgres import ThrowawayCluster, free_port
from helpers import (
    attach_table,
    create_executions,
    daemon_env,
    http_get,
    sample,
    seed_executions,
    spawn_daemon,
    wait_until,
)
from pod_sweeper.core.settings import Settings
from pod_sweeper.store import db
from pod_sweeper.store.schema import migrations

pytestmark = pytest.mark.versions


def _primary_and_standby(name: str, *, synchronous: bool) -> Iterator[tuple[ThrowawayCluster, ThrowawayCluster]]:
    """A primary and a streaming standby called ``name``, synchronous or not, once it streams so."""
    with ThrowawayCluster(extra_settings={"synchronous_commit": "on"}) as primary:
        standby = primary.standby(name=name)
        try:
            with psycopg.connect(primary.url(), autocommit=True) as conn:
                if synchronous:
                    conn.execute(sql.SQL("ALTER SYSTEM SET synchronous_standby_names = {}").format(sql.Literal(name)))
                    conn.execute("SELECT pg_reload_conf()")
                state = "sync" if synchronous else "async"
                wait_until(
                    lambda: conn.execute(
                        "SELECT 1 FROM pg_stat_replication WHERE application_name = %s AND sync_state = %s",
                        (name, state),
                    ).fetchone(),
                    timeout=30,
                    what=f"the standby streaming, {state}",
                )
            yield primary, standby
        finally:
            standby.cleanup()


@pytest.fixture
def primary_and_standby() -> Iterator[tuple[ThrowawayCluster, ThrowawayCluster]]:
    yield from _primary_and_standby("standby", synchronous=True)


async def _prepare(url: str) -> None:
    async with db.connection(Settings(database_url=url, http_port=0)) as conn:
        await migrations.migrate(conn)


def test_the_daemon_drains_through_a_promoted_standby(
    primary_and_standby: tuple[ThrowawayCluster, ThrowawayCluster], kube: Any, tmp_path: Path
) -> None:
    import asyncio

    primary, standby = primary_and_standby
    multi_host = (
        f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} dbname=postgres user=postgres"
        " target_session_attrs=read-write connect_timeout=2"
    )
    asyncio.run(_prepare(primary.url()))
    asyncio.run(attach_table_after_create(primary.url()))
    with psycopg.connect(primary.url(), autocommit=True, row_factory=dict_row) as conn:
        seed_executions(conn, kube, 240)
    active = {f"p{i}" for i in range(200, 240)}  # never retired: their pods must not be touched

    port = free_port()
    log = tmp_path / "daemon.log"
    env = daemon_env(
        multi_host,
        kube.kubeconfig,
        POD_SWEEPER_HTTP_PORT=str(port),
        POD_SWEEPER_HTTP_HOST="127.0.0.1",
        POD_SWEEPER_LEASE_SECONDS="5",
        POD_SWEEPER_REQUEST_TIMEOUT="2",
        POD_SWEEPER_CONCURRENCY="4",
        POD_SWEEPER_BATCH_SIZE="10",
        POD_SWEEPER_CONNECT_TIMEOUT="2",
        POD_SWEEPER_MAX_ATTEMPTS="50",
    )
    proc = spawn_daemon(env, log)
    ready = "pod_sweeper_ready"
    try:
        wait_until(lambda: sample(http_get(port, "/metrics")[1], ready) == 1, timeout=60, what="the daemon ready")
        kube.inject("delay", method="DELETE", seconds=0.05, times=None)  # a drain that lasts a few seconds
        before = [f"s{i}" for i in range(190)]
        with psycopg.connect(primary.url(), autocommit=True) as conn:
            conn.execute("UPDATE executions SET active = false WHERE sandbox_id = ANY(%s)", (before,))
        wait_until(lambda: len(kube.deletes()) >= 40, timeout=30, what="the drain under way")

        primary.stop("immediate")
        standby.promote()

        # The retires committed on the primary are on the standby (synchronous replication); new
        # retires after the failover go to the new primary.
        with psycopg.connect(standby.url(), autocommit=True, row_factory=dict_row) as conn:
            done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done'"
            assert conn.execute(done).fetchone()["n"] < 190  # the primary died mid-drain
            after_failover = [f"s{i}" for i in range(190, 200)]
            conn.execute("UPDATE executions SET active = false WHERE sandbox_id = ANY(%s)", (after_failover,))
            wait_until(lambda: conn.execute(done).fetchone()["n"] == 200, timeout=90, what="every retired row done")
            rows = conn.execute("SELECT pod_name, outcome FROM pod_sweeper.outbox").fetchall()
        wait_until(lambda: sample(http_get(port, "/metrics")[1], ready) == 1, timeout=30, what="the daemon ready again")
        after = http_get(port, "/metrics")[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    output = log.read_text()
    assert code == 0, output[-3000:]
    assert len(rows) == 200 and {r["pod_name"] for r in rows} == {f"p{i}" for i in range(200)}
    # Every retired pod was deleted under its UID: by this DELETE, or by one whose answer was lost
    # with the old primary (then the retry finds it gone or terminating).
    accepted = {d.path.rsplit("/", 1)[1] for d in kube.deletes() if d.status == 200}
    assert accepted == {f"p{i}" for i in range(200)}, sorted({f"p{i}" for i in range(200)} - accepted)
    assert {r["outcome"] for r in rows} <= {"deleted", "absent"}
    touched = {d.path.rsplit("/", 1)[1] for d in kube.deletes()}
    assert touched.isdisjoint(active)
    assert sample(after, "pod_sweeper_db_errors_total") >= 1  # the outage was noticed, and survived


async def attach_table_after_create(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        create_executions(conn)
    await attach_table(url)


@pytest.fixture
def primary_and_async_standby() -> Iterator[tuple[ThrowawayCluster, ThrowawayCluster]]:
    """A primary and an asynchronous standby (no synchronous_standby_names), as a cross-region replica
    or a read replica promoted for disaster recovery is."""
    yield from _primary_and_standby("dr", synchronous=False)


def test_with_the_guard_no_pod_is_deleted_for_a_retire_a_failover_loses(
    primary_and_async_standby: tuple[ThrowawayCluster, ThrowawayCluster], kube: Any, tmp_path: Path
) -> None:
    """POD_SWEEPER_REPLICATION_GUARD=dr: a retire the standby has flushed is swept; with the standby
    stopped, a retire is held, unclaimed; the primary dies and the standby is promoted without it: its
    pod was never deleted, and the promoted database shows its generation active, as the pod is."""
    import asyncio

    primary, standby = primary_and_async_standby
    multi_host = (
        f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} dbname=postgres user=postgres"
        " target_session_attrs=read-write connect_timeout=2"
    )
    asyncio.run(_prepare(primary.url()))
    asyncio.run(attach_table_after_create(primary.url()))
    with psycopg.connect(primary.url(), autocommit=True, row_factory=dict_row) as conn:
        seed_executions(conn, kube, 6)
    port = free_port()
    log = tmp_path / "daemon.log"
    env = daemon_env(
        multi_host,
        kube.kubeconfig,
        POD_SWEEPER_HTTP_PORT=str(port),
        POD_SWEEPER_HTTP_HOST="127.0.0.1",
        POD_SWEEPER_CONNECT_TIMEOUT="2",
        POD_SWEEPER_REPLICATION_GUARD="dr",
    )
    proc = spawn_daemon(env, log)

    def metric(name: str) -> float | None:
        return sample(http_get(port, "/metrics")[1], name)

    try:
        wait_until(lambda: metric("pod_sweeper_ready") == 1, timeout=60, what="the daemon ready")
        with psycopg.connect(primary.url(), autocommit=True, row_factory=dict_row) as conn:
            conn.execute("UPDATE executions SET active = false WHERE sandbox_id IN ('s0', 's1')")
            wait_until(lambda: kube.get_pod("sandboxes", "p1") is None, timeout=30, what="replicated retires swept")
            assert kube.get_pod("sandboxes", "p0") is None
            standby.stop("fast")  # the standby falls behind (a network cut, a slow region)
            wait_until(
                lambda: metric("pod_sweeper_replication_guard_standbys_missing") == 1,
                timeout=30,
                what="the guard's standby reported missing",
            )
            conn.execute("UPDATE executions SET active = false WHERE sandbox_id = 's2'")
            # The retire's row waits, unclaimed, while the primary cannot show the standby has it.
            wait_until(
                lambda: conn.execute(
                    "SELECT guard_lsn IS NOT NULL AS marked FROM pod_sweeper.outbox WHERE sandbox_id = 's2'"
                ).fetchone()["marked"],
                timeout=30,
                what="the row marked by a claim round",
            )
            row = conn.execute("SELECT status, attempts FROM pod_sweeper.outbox WHERE sandbox_id = 's2'").fetchone()
            assert (row["status"], row["attempts"]) == ("pending", 0)
            wait_until(
                lambda: (
                    (metric("pod_sweeper_replication_guard_holding"), metric("pod_sweeper_replication_guard_held_rows"))
                    == (1, 1)
                ),
                timeout=30,
                what="the guard's gauges naming the held row",
            )
        assert kube.get_pod("sandboxes", "p2") is not None
        primary.stop("immediate")  # the primary is lost, and the retire with it
        standby.start()
        standby.promote()
        with psycopg.connect(standby.url(), autocommit=True, row_factory=dict_row) as conn:
            lost = conn.execute("SELECT active FROM executions WHERE sandbox_id = 's2'").fetchone()
            assert lost["active"] is True  # the promoted database never saw the retire
            assert conn.execute("SELECT 1 FROM pod_sweeper.outbox WHERE sandbox_id = 's2'").fetchone() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert kube.get_pod("sandboxes", "p2") is not None  # its generation is active: the pod stays
    assert not [d for d in kube.deletes() if d.path.endswith("/p2")]
    assert code == 0, log.read_text()[-3000:]


def test_a_standby_connected_but_behind_holds_the_rows_and_every_surface_says_so(
    primary_and_async_standby: tuple[ThrowawayCluster, ThrowawayCluster], kube: Any
) -> None:
    """The standby stays connected but stops flushing (its WAL receiver stopped with SIGSTOP: the
    connection open, as a congested link or a stalled standby keeps it, until wal_sender_timeout): the
    guard holds the retires made meanwhile, and says so as holding, not as a missing standby: held rows,
    how far behind, the replica's wait reason, each held row's reason in `explain` and `status` (run with
    the database URL alone: the guard is read from the replica's row). Once it
    flushes again, they are swept."""
    import asyncio
    import os

    from helpers import DaemonThread, cli, daemon_settings

    primary, standby = primary_and_async_standby
    asyncio.run(_prepare(primary.url()))
    asyncio.run(attach_table_after_create(primary.url()))
    with psycopg.connect(primary.url(), autocommit=True, row_factory=dict_row) as conn:
        seed_executions(conn, kube, 4)
    settings = daemon_settings(primary.url(), kube, replication_guard=frozenset({"dr"}), poll_interval=1.0)
    with (
        DaemonThread(settings) as replica,
        psycopg.connect(primary.url(), autocommit=True, row_factory=dict_row) as conn,
        psycopg.connect(standby.url(), autocommit=True, row_factory=dict_row) as on_standby,
    ):
        metrics = replica.daemon.metrics
        conn.execute("UPDATE executions SET active = false WHERE sandbox_id = 's0'")
        wait_until(lambda: kube.get_pod("sandboxes", "p0") is None, timeout=30, what="a replicated retire swept")
        receiver = on_standby.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()
        assert receiver is not None
        os.kill(receiver["pid"], signal.SIGSTOP)
        try:
            conn.execute("UPDATE executions SET active = false WHERE sandbox_id IN ('s1', 's2', 's3')")
            wait_until(
                lambda: metrics.value("pod_sweeper_replication_guard_held_rows") == 3,
                timeout=30,
                what="three rows held",
            )
            assert metrics.value("pod_sweeper_replication_guard_standbys_missing") == 0  # connected
            assert metrics.value("pod_sweeper_replication_guard_holding") == 1
            assert metrics.value("pod_sweeper_replication_guard_lag_bytes") > 0
            wait_until(lambda: metrics.value("pod_sweeper_waiting", reason="replication_guard") == 1, timeout=10)
            assert metrics.value("pod_sweeper_waiting_rows", pod_cluster="default", reason="replication_guard") == 3
            assert replica.daemon.ready  # the guard's hold leaves the replica ready (its alert pages)
            said = cli("explain", "sandboxes/p1", url=primary.url())  # a shell with the URL alone
            assert "waits [replication_guard]" in said.stdout, said.stdout + said.stderr
            shown = cli("status", url=primary.url()).stdout
            assert "replication guard (dr): 1 connected, 0 missing; the slowest has flushed" in shown, shown
            assert all(kube.get_pod("sandboxes", f"p{i}") is not None for i in (1, 2, 3))
        finally:
            os.kill(receiver["pid"], signal.SIGCONT)
        wait_until(
            lambda: all(kube.get_pod("sandboxes", f"p{i}") is None for i in (1, 2, 3)),
            timeout=30,
            what="the held retires swept once the standby flushed",
        )
        wait_until(lambda: metrics.value("pod_sweeper_replication_guard_held_rows") == 0, timeout=15)
