"""The blast-radius breaker: a burst of retires trips it at the configured rate, across replicas; it
holds across a restart and lifts only with `resume`; and a breaker tripped before each cluster had its
own (migration 0010) stays tripped for every cluster it held. (Two clusters with one tripped:
tests/integration/test_clusters.py, and on the real API servers tests/realkube/test_clusters.py.)"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from helpers import DaemonThread, attach_table, cli, create_executions, run, seed_executions, settings_for, wait_until
from pod_sweeper.cli import status_text
from pod_sweeper.store import db
from pod_sweeper.store.reads import status
from pod_sweeper.store.schema import migrations
from pod_sweeper.store.sweep import breaker

LIMIT = 30


def accepted(kube: Any) -> int:
    return sum(1 for d in kube.deletes() if d.status == 200)


def test_burst_trips_the_breaker_which_holds_across_restarts_until_resume(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    seed_executions(execs, kube, 10_000)
    settings = settings_for(
        db_url,
        kubeconfig=kube.kubeconfig,
        rate_limit_qps=0,
        poll_interval=0.3,
        max_deletes_per_minute=LIMIT,
        concurrency=8,
        batch_size=10,
    )
    # Two replicas share the budget: it is counted from the database, not per process.
    first, second = (
        DaemonThread(settings).start(),
        DaemonThread(settings.model_copy(update={"replica_id": "second"})).start(),
    )
    try:
        execs.execute("UPDATE executions SET active = false")  # a bad migration retires everything
        wait_until(
            lambda: first.daemon.sweeper.status.breaker and second.daemon.sweeper.status.breaker,
            timeout=30,
            what="both replicas to see the breaker trip",
        )
        wait_until(lambda: not first.daemon.ready, what="readiness to follow the trip")
        assert "blast-radius breaker tripped" in first.daemon.health.readiness()[1]
        assert first.daemon.metrics.value("pod_sweeper_breaker_tripped", pod_cluster="default") == 1
        # Let the rows in hand settle: a delete granted budget may still be in flight, and rows granted
        # budget but still queued when the trip lands are handed back uncharged.
        wait_until(
            lambda: (
                execs.execute("SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'claimed'").fetchone()["n"]
                == 0
            ),
            what="the claims in hand to settle",
        )
        held = accepted(kube)
        assert LIMIT // 2 <= held <= LIMIT  # never more than the budget; the rest waits
    finally:
        assert first.stop() == 0 and second.stop() == 0
    row = execs.execute("SELECT reason, tripped_by FROM pod_sweeper.breaker").fetchone()
    assert f"POD_SWEEPER_MAX_DELETES_PER_MINUTE={LIMIT}" in row["reason"]

    async def read() -> Any:
        async with db.connection(settings_for(db_url)) as conn:
            return await status.read_status(conn)

    assert "BREAKER TRIPPED" in status_text.render_text(run(read()))

    again = DaemonThread(settings).start(ready=False)  # a restart does not reset it
    try:
        wait_until(lambda: again.daemon.sweeper.status.breaker, what="the restarted daemon to see the trip")
        assert accepted(kube) == held

        async def resume() -> dict[str, bool]:
            async with db.connection(settings_for(db_url)) as conn:
                return await breaker.reset_breakers(conn, cluster="default", all_clusters=False, who="test")

        assert run(resume()) == {"default": True}
        wait_until(lambda: accepted(kube) >= held + LIMIT, timeout=30, what="deletes to resume")
        wait_until(lambda: again.daemon.sweeper.status.breaker, timeout=30, what="the next trip")
    finally:
        assert again.stop() == 0
    assert accepted(kube) == 2 * LIMIT
    pending = execs.execute("SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'pending'").fetchone()["n"]
    assert pending == 10_000 - 2 * LIMIT  # nothing lost, nothing charged: the rest simply waits


def test_breaker_off_with_zero(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    seed_executions(execs, kube, 50)
    with DaemonThread(settings_for(db_url, kubeconfig=kube.kubeconfig, rate_limit_qps=0, max_deletes_per_minute=0)):
        execs.execute("UPDATE executions SET active = false")
        wait_until(lambda: accepted(kube) == 50)


def test_a_breaker_tripped_before_clusters_had_their_own_stays_tripped_for_each_it_held(
    empty_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migrated to 0009 with two clusters attached and the one breaker tripped, then migrated on: each
    known cluster's breaker is tripped with the old reason (and a note), and each is resumed alone."""

    async def migrate() -> None:
        async with db.connection(settings_for(empty_db_url)) as conn:
            await migrations.migrate(conn)

    before = tuple(m for m in migrations.shipped() if m.version <= 9)
    monkeypatch.setattr(migrations, "shipped", lambda: before)
    run(migrate())
    with psycopg.connect(empty_db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        create_executions(conn)
        create_executions(conn, "public.elsewhere")
        run(attach_table(empty_db_url))  # the default cluster
        run(attach_table(empty_db_url, "public.elsewhere", cluster="east"))
        conn.execute("UPDATE pod_sweeper.breaker SET tripped_at = now(), reason = 'too many', tripped_by = 'r1'")
        monkeypatch.undo()
        run(migrate())  # 0010 on a tripped breaker
        breakers = {r["cluster"]: r for r in conn.execute("SELECT * FROM pod_sweeper.breaker").fetchall()}
        assert set(breakers) == {"default", "east"}
        for row in breakers.values():
            assert row["tripped_at"] is not None and row["tripped_by"] == "r1"
            assert row["reason"] == "too many (tripped before migration 0010, when one breaker held every cluster)"
        resumed = cli("reset-breaker", "--cluster", "east", url=empty_db_url)
        assert resumed.returncode == 0 and "deletes resume in cluster east" in resumed.stdout
        assert "still tripped: cluster default" in resumed.stderr
        left = {r["cluster"]: r["tripped_at"] for r in conn.execute("SELECT * FROM pod_sweeper.breaker").fetchall()}
        assert left["east"] is None and left["default"] is not None
        shown = cli("status", url=empty_db_url)
        assert "BREAKER TRIPPED (cluster default)" in shown.stdout and "(cluster east)" not in shown.stdout


def test_the_ceilings_window_counts_claims_that_may_still_delete_not_leases_a_gone_replica_left(
    pg: psycopg.Connection[Any], db_url: str
) -> None:
    """sql/breaker_window.sql's rows claimed right now: a lease still running, or a row whose replica is
    live by its heartbeat (pod_sweeper.replicas) though its lease ran out (it may still record a delete);
    not a lease that ran out under a replica gone (crashed, stale): counted, such rows as many as the
    ceiling held the breaker tripped for ever (issue 53's simulator, seed 47 then, 38 now)."""
    pg.execute("INSERT INTO pod_sweeper.breaker (cluster) VALUES ('default') ON CONFLICT DO NOTHING")
    pg.execute(
        "INSERT INTO pod_sweeper.replicas (replica, host, release, schema_version, cluster, dry_run, rate_limit,"
        " concurrency, ready, heartbeat_seconds, started_at, seen_at) VALUES"
        " ('live', 'h', '0', 20, 'default', false, 100, 8, true, 10, now(), now()),"
        " ('stale', 'h', '0', 20, 'default', false, 100, 8, true, 10, now(), now() - interval '5 minutes')"
    )
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason, status, claimed_by, claimed_at, claim_epoch, next_attempt_at)"
        " SELECT 1, s, 1, 'ns', s, gen_random_uuid(), 'retired', 'claimed', owner, now(), 1, now() + lease"
        " FROM (VALUES ('running', 'gone', interval '1 minute'), ('live-expired', 'live', interval '-1 minute'),"
        "             ('stale-expired', 'stale', interval '-1 minute'), ('gone-expired', 'gone', interval '-1 minute'))"
        " AS v(s, owner, lease)"
    )

    async def window() -> int:
        async with db.connection(settings_for(db_url)) as conn, conn.transaction():
            return (await breaker.breaker_window(conn, "default")).claimed

    assert run(window()) == 2  # the running lease, and the live replica's row whose lease ran out
