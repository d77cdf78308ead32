"""The DBA and on-call toolkit on a real database: retry, prune (and the daemon's retention pass),
status with failures and expired claims, and every shipped query."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from helpers import DaemonThread, outbox, run, settings_for, wait_until
from pod_sweeper.cli import status_text
from pod_sweeper.store import db, queries
from pod_sweeper.store.admin import bulk
from pod_sweeper.store.reads import status
from pod_sweeper.store.sweep import retention

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.versions


def add_rows(conn: psycopg.Connection[Any], n: int, **columns: Any) -> None:
    conn.execute(
        "INSERT INTO pod_sweeper.attachments (table_schema, table_name, column_map)"
        " VALUES ('public', 'executions', '{}') ON CONFLICT DO NOTHING"
    )
    sets = ", ".join(f"{k} = %({k})s" for k in columns)
    conn.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason) SELECT 1, 's' || g, g, 'ns', 'p' || g, gen_random_uuid(), 'retired' FROM generate_series(1, %s) g",
        (n,),
    )
    if columns:
        conn.execute(f"UPDATE pod_sweeper.outbox SET {sets}", columns)  # type: ignore[arg-type]  # noqa: S608


async def _with(url: str, fn: Any) -> Any:
    async with db.connection(settings_for(url)) as conn:
        return await fn(conn)


def test_retry_reopens_dead_rows_and_says_so(pg: psycopg.Connection[Any], db_url: str) -> None:
    add_rows(pg, 3, status="dead", attempts=10, last_error="503 ServiceUnavailable", last_http_status=503)
    reopened = run(_with(db_url, lambda c: bulk.retry(c, [1, 2, 3], who="alice")))
    assert len(reopened) == 3
    for row in outbox(pg):
        assert (row["status"], row["attempts"]) == ("pending", 0)
        assert row["last_error"].startswith("reopened by alice at ") and "(was dead: 503" in row["last_error"]


def test_retry_by_id_leaves_claimed_rows_alone(pg: psycopg.Connection[Any], db_url: str) -> None:
    add_rows(pg, 2, status="claimed", claimed_by="r1")
    pg.execute("UPDATE pod_sweeper.outbox SET status = 'done', outcome = 'replaced', done_at = now() WHERE id = 1")
    reopened = run(_with(db_url, lambda c: bulk.retry(c, [1, 2], who="bob")))
    assert reopened == [1]
    assert [r["status"] for r in outbox(pg)] == ["pending", "claimed"]


def test_prune_deletes_only_old_done_rows_in_batches(pg: psycopg.Connection[Any], db_url: str) -> None:
    add_rows(pg, 2500, status="done", outcome="deleted", done_at="2000-01-01")
    pg.execute("UPDATE pod_sweeper.outbox SET done_at = now() WHERE id <= 10")
    pg.execute("UPDATE pod_sweeper.outbox SET status = 'dead', outcome = NULL, done_at = NULL WHERE id > 2490")
    deleted = run(_with(db_url, lambda c: retention.prune(c, retention_seconds=3600, batch=1000)))
    assert deleted == 2480
    left = pg.execute("SELECT status, count(*) AS n FROM pod_sweeper.outbox GROUP BY 1 ORDER BY 1").fetchall()
    assert [(r["status"], r["n"]) for r in left] == [("dead", 10), ("done", 10)]


def test_prune_yields_to_the_replica_holding_the_lock(pg: psycopg.Connection[Any], db_url: str) -> None:
    add_rows(pg, 5, status="done", outcome="deleted", done_at="2000-01-01")
    with psycopg.connect(db_url) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (queries.Lock.PRUNE.value,))
        assert run(_with(db_url, lambda c: retention.prune(c, retention_seconds=1))) is None
    assert run(_with(db_url, lambda c: retention.prune(c, retention_seconds=1))) == 5


def test_daemon_retention_pass(pg: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_rows(pg, 30, status="done", outcome="deleted", done_at="2000-01-01")
    pg.execute(
        "INSERT INTO pod_sweeper.audit (at, actor, command) VALUES"
        " (now() - interval '40 days', 'old', 'pause'), (now() - interval '20 days', 'recent', 'pause')"
    )
    settings = settings_for(db_url, kubeconfig=kube.kubeconfig, retention=3600, audit_retention=30 * 86400)
    with DaemonThread(settings) as daemon:
        wait_until(lambda: outbox(pg) == [], what="the retention pass")
        assert daemon.daemon.metrics.value("pod_sweeper_pruned_rows_total") == 30
        # The audit trail keeps its own, longer retention (30 days here, the least it may be).
        wait_until(
            lambda: [r["actor"] for r in pg.execute("SELECT actor FROM pod_sweeper.audit").fetchall()] == ["recent"],
            what="the audit row past its retention pruned",
        )


def test_status_shows_failures_and_expired_claims(pg: psycopg.Connection[Any], db_url: str) -> None:
    add_rows(
        pg,
        1,
        status="claimed",
        claimed_by="gone-replica",
        claimed_at="2000-01-01",
        next_attempt_at="2000-01-01 00:01",
        last_error="503 ServiceUnavailable: injected",
    )
    current = run(_with(db_url, status.read_status))
    assert current["stuck_claims"][0]["claimed_by"] == "gone-replica"
    assert current["recent_failures"][0]["last_error"].startswith("503")
    text = status_text.render_text(current)
    assert "recent failures" in text and "expired claims" in text and "gone-replica" in text


@pytest.mark.parametrize("name", queries.dba_query_names())
def test_every_shipped_dba_query_runs(pg: psycopg.Connection[Any], name: str) -> None:
    add_rows(pg, 3, status="dead", last_error="x")
    pg.execute(queries.load(f"dba/{name}"))


def test_alerts_query_fires_on_dead_rows_and_lag(pg: psycopg.Connection[Any]) -> None:
    def alerts() -> set[str]:
        return {r["alert"] for r in pg.execute(queries.load("dba/alerts")).fetchall()}

    assert alerts() == set()
    add_rows(pg, 1, status="dead", last_error="x")
    assert alerts() == set()  # dead for less than the rule's 5 minutes
    pg.execute("UPDATE pod_sweeper.outbox SET updated_at = now() - interval '6 minutes' WHERE status = 'dead'")
    late = (
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name,"
        " pod_uid, reason, enqueued_at) VALUES (1, 'late', 1, 'ns', 'late', gen_random_uuid(), 'retired',"
        " now() - interval '1 hour')"
    )
    pg.execute(late)
    # (the row's cluster, the default one, has waited an hour with nothing claiming it, and no replica of
    # it is known: unswept, and no live replica, too)
    assert alerts() == {
        "PodSweeperDeadRows",
        "PodSweeperLagHigh",
        "PodSweeperNoProgress",
        "PodSweeperClusterUnswept",
        "PodSweeperNoLiveReplica",
    }
    pg.execute(
        "UPDATE pod_sweeper.outbox SET status = 'claimed', claimed_by = 'frozen', claim_epoch = 1,"
        " claimed_at = now() - interval '16 minutes', next_attempt_at = now() - interval '1 minute'"
        " WHERE sandbox_id = 'late'"
    )
    assert "PodSweeperStuckClaim" in alerts()
    refused = (
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name,"
        " pod_uid, reason, enqueued_at, last_http_status) VALUES (1, %s, 1, 'locked', %s, gen_random_uuid(),"
        " 'retired', now() - make_interval(mins => %s), 403)"
    )
    pg.execute(refused, ("recent", "recent", 5))
    assert "PodSweeperNamespaceRefused" not in alerts()  # refused for less than the rule's 15 minutes
    pg.execute(refused, ("old", "old", 20))
    [row] = [r for r in pg.execute(queries.load("dba/alerts")).fetchall() if r["alert"] == "PodSweeperNamespaceRefused"]
    assert row["detail"].startswith("cluster default, namespace locked answers 403: 2 row(s) waiting")
    pg.execute(
        "INSERT INTO pod_sweeper.rejects (attachment_id, reason, problem, rejected_at)"
        " VALUES (1, 'retired', 'pod_name is NULL', now() - interval '1 minute')"
    )
    assert "PodSweeperRejectedRetires" not in alerts()  # for less than the rule's 5 minutes
    pg.execute("UPDATE pod_sweeper.rejects SET rejected_at = now() - interval '6 minutes'")
    assert "PodSweeperRejectedRetires" in alerts()
    rule = yaml.safe_load((ROOT / "deploy" / "monitoring" / "prometheusrule.yaml").read_text())
    pg.execute("UPDATE pod_sweeper.outbox SET cluster = 'east' WHERE sandbox_id = 'late'")
    # The default cluster's old rows fire it too: the row is found by its cluster.
    fired = pg.execute(queries.load("dba/alerts")).fetchall()
    unswept = [r["detail"] for r in fired if r["alert"] == "PodSweeperClusterUnswept"]
    assert any(d.startswith("cluster east: the oldest claimable row has waited") for d in unswept), unswept
    nobody = [r["detail"] for r in fired if r["alert"] == "PodSweeperNoLiveReplica"]
    assert any(d.startswith("cluster east: 1 open row(s)") for d in nobody), nobody
    pg.execute(  # a live replica of east (its heartbeat's row) ends it there
        "INSERT INTO pod_sweeper.replicas (replica, host, release, schema_version, cluster, dry_run, rate_limit,"
        " concurrency, ready, heartbeat_seconds, started_at, seen_at)"
        " VALUES ('east-a', 'h', '0', 19, 'east', false, 100, 8, true, 10, now(), now())"
    )
    fired = pg.execute(queries.load("dba/alerts")).fetchall()
    assert not any(r["detail"].startswith("cluster east") for r in fired if r["alert"] == "PodSweeperNoLiveReplica")
    pg.execute("UPDATE pod_sweeper.replicas SET seen_at = now() - interval '31 seconds'")  # three beats missed
    fired = pg.execute(queries.load("dba/alerts")).fetchall()
    assert any(r["detail"].startswith("cluster east") for r in fired if r["alert"] == "PodSweeperNoLiveReplica")
    # The guard's alert reads the standbys from the live replicas' rows: one naming a standby that is not
    # connected holds east's row, enqueued over 7 minutes ago.
    pg.execute("UPDATE pod_sweeper.replicas SET seen_at = now(), guard = '{no-such-standby}'")
    pg.execute("UPDATE pod_sweeper.outbox SET enqueued_at = now() - interval '8 minutes' WHERE cluster = 'east'")
    fired = pg.execute(queries.load("dba/alerts")).fetchall()
    guarded = [r["detail"] for r in fired if r["alert"] == "PodSweeperReplicationGuardHolding"]
    assert [d.split(":")[0] for d in guarded] == ["cluster east"] and "standbys no-such-standby" in guarded[0], guarded
    pg.execute("UPDATE pod_sweeper.replicas SET guard = NULL")
    pg.execute(  # a large host transaction the claim found: kept back until a person ends it
        "INSERT INTO pod_sweeper.large_transactions (cluster, enqueued_at, rows_found, reason, found_by)"
        " VALUES ('east', now() - interval '1 minute', 600, 'one host transaction retired at least 600', 'east-a')"
    )
    fired = pg.execute(queries.load("dba/alerts")).fetchall()
    large = [r["detail"] for r in fired if r["alert"] == "PodSweeperLargeTransaction"]
    assert len(large) == 1 and large[0].startswith("cluster east: large transaction"), large
    pg.execute("UPDATE pod_sweeper.large_transactions SET ended_at = now(), ended = 'released', ended_by = 'ana'")
    assert "PodSweeperLargeTransaction" not in {r["alert"] for r in pg.execute(queries.load("dba/alerts")).fetchall()}
    in_sql = {
        "PodSweeperReplicationGuardHolding",
        "PodSweeperNoLiveReplica",
        "PodSweeperLargeTransaction",
        "PodSweeperClusterUnswept",
        "PodSweeperRejectedRetires",
        "PodSweeperDeadRows",
        "PodSweeperLagHigh",
        "PodSweeperNoProgress",
        "PodSweeperStuckClaim",
        "PodSweeperNamespaceRefused",
        "PodSweeperBreakerTripped",
        "PodSweeperKubeUnreachable",
        "PodSweeperPausedLong",
    }
    # No SQL form: a replica's readiness is its probe's; a rate held for minutes is Prometheus's to
    # average (`status` shows the last minute's).
    no_sql_form = {"PodSweeperNotReady", "PodSweeperBacklogGrowing"}
    assert {r["alert"] for r in rule["spec"]["groups"][0]["rules"]} == in_sql | no_sql_form
    assert not {"PodSweeperBreakerTripped", "PodSweeperKubeUnreachable"} & {r["alert"] for r in fired}
    pg.execute("UPDATE pod_sweeper.breaker SET tripped_at = now(), reason = 'a burst' WHERE cluster = 'default'")
    pg.execute(
        "INSERT INTO pod_sweeper.outages VALUES ('east', 'r1', now() - interval '6 minutes', 'refused', now()),"
        " ('west', 'r2', now() - interval '4 minutes', 'refused', now()),"  # not for 5 minutes yet
        " ('north', 'r3', now() - interval '2 hours', 'refused', now() - interval '1 hour')"  # a dead replica's
    )
    fired = pg.execute(queries.load("dba/alerts")).fetchall()
    tripped = [r["detail"] for r in fired if r["alert"] == "PodSweeperBreakerTripped"]
    assert [d.split(":")[0] for d in tripped] == ["cluster default"] and "(a burst)" in tripped[0]
    unreachable = [r["detail"] for r in fired if r["alert"] == "PodSweeperKubeUnreachable"]
    assert [d.split(":")[0] for d in unreachable] == ["cluster east"]
    pg.execute(
        "INSERT INTO pod_sweeper.pauses (cluster, pod_namespace, reason, actor, since, until) VALUES"
        " ('east', 'alpha', 'incident', 'ana', now() - interval '3 hours', now() + interval '1 hour'),"
        " ('west', '', 'short', 'bo', now() - interval '1 hour', now() + interval '1 hour'),"
        " ('north', '', 'over', 'cy', now() - interval '5 hours', now() - interval '1 hour')"  # ended
    )
    paused = [
        r["detail"] for r in pg.execute(queries.load("dba/alerts")).fetchall() if r["alert"] == "PodSweeperPausedLong"
    ]
    assert [d.split(":")[0] for d in paused] == ["cluster east, namespace alpha"] and "by ana (incident)" in paused[0]
