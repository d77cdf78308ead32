"""The daemon against real PostgreSQL and the fake API server through the real client: every row of the
outcome table, the safety invariants, wakeups, leases and fencing."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from helpers import (
    DaemonThread,
    add_execution,
    attach_table,
    claim,
    create_executions,
    daemon_settings,
    retire,
    row_for,
    run,
    seed_executions,
    settings_for,
    sleeping,
    wait_until,
)
from pod_sweeper.core.settings import DEFAULT_CLUSTER
from pod_sweeper.core.states import Result
from pod_sweeper.store import db
from pod_sweeper.store.rows import Verdict
from pod_sweeper.store.sweep import outbox
from pod_sweeper.store.sweep.recheck import BareLookupFailed, load_attachments

pytestmark = pytest.mark.versions


def finished(conn: psycopg.Connection[Any], sid: str) -> dict[str, Any] | None:
    row = row_for(conn, sid)
    return row if row and row["status"] in ("done", "dead") else None


def test_retire_deletes_the_pod_under_its_uid_within_2s(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    uid = add_execution(execs, kube, "a")
    with DaemonThread(daemon_settings(db_url, kube)):
        started = time.monotonic()
        retire(execs, "a")
        row = wait_until(lambda: finished(execs, "a"), timeout=2, what="the row to finish by NOTIFY")
        assert time.monotonic() - started < 2
    assert (row["status"], row["outcome"], row["last_http_status"], row["attempts"]) == ("done", "deleted", 200, 1)
    assert kube.get_pod("sandboxes", "pod-a-1") is None
    [delete] = kube.deletes()
    assert delete.body["preconditions"] == {"uid": uid}
    assert row["claimed_by"] == "test-replica" and row["done_at"] is not None


def test_scheduled_pod_is_deleted_gracefully(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_execution(execs, kube, "a", node_name="node-1")
    with DaemonThread(daemon_settings(db_url, kube)):
        retire(execs, "a")
        row = wait_until(lambda: finished(execs, "a"))
    assert row["outcome"] == "deleted"
    pod = kube.get_pod("sandboxes", "pod-a-1")
    assert pod is not None and pod["metadata"]["deletionTimestamp"]  # terminating, as on a real cluster


def test_already_gone_pod_is_absent(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_execution(execs, kube, "a")
    kube.remove_pod("sandboxes", "pod-a-1")
    with DaemonThread(daemon_settings(db_url, kube)):
        retire(execs, "a")
        row = wait_until(lambda: finished(execs, "a"))
    assert (row["outcome"], row["last_http_status"]) == ("absent", 404)


def test_same_name_replacement_is_never_deleted(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    old_uid = add_execution(execs, kube, "a")
    kube.remove_pod("sandboxes", "pod-a-1")
    replacement = kube.create_pod("sandboxes", "pod-a-1")
    assert replacement["metadata"]["uid"] != old_uid
    with DaemonThread(daemon_settings(db_url, kube)):
        retire(execs, "a")
        row = wait_until(lambda: finished(execs, "a"))
    assert (row["outcome"], row["last_http_status"]) == ("replaced", 409)
    survivor = kube.get_pod("sandboxes", "pod-a-1")
    assert survivor is not None and survivor["metadata"]["uid"] == replacement["metadata"]["uid"]
    assert "deletionTimestamp" not in survivor["metadata"]
    assert all(d.body["preconditions"]["uid"] == old_uid for d in kube.deletes())


def test_409_for_a_pod_that_vanished_mid_delete_is_absent(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    kube.remove_pod("sandboxes", "pod-a-1")
    kube.inject("status", method="DELETE", code=409, reason="Conflict")
    with DaemonThread(daemon_settings(db_url, kube)):
        retire(execs, "a")
        row = wait_until(lambda: finished(execs, "a"))
    assert (row["outcome"], row["last_http_status"]) == ("absent", 409)
    assert [r.method for r in kube.api_calls()] == ["DELETE", "GET"]


def test_active_generation_is_never_deleted(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_execution(execs, kube, "a")
    with psycopg.connect(db_url, autocommit=True) as conn:
        retire(conn, "a")
        conn.execute("UPDATE executions SET active = true WHERE sandbox_id = 'a'")  # reactivated before the claim
    with DaemonThread(daemon_settings(db_url, kube)):
        row = wait_until(lambda: finished(execs, "a"))
    assert row["outcome"] == "skipped_active"
    assert kube.deletes() == []
    assert kube.get_pod("sandboxes", "pod-a-1") is not None


def test_deleted_execution_row_still_gets_its_pod_deleted(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    with DaemonThread(daemon_settings(db_url, kube)):
        execs.execute("DELETE FROM executions WHERE sandbox_id = 'a'")
        row = wait_until(lambda: finished(execs, "a"))
    assert (row["reason"], row["outcome"]) == ("row_deleted", "deleted")


@pytest.mark.parametrize(
    "fault",
    [
        {"action": "status", "code": 429, "text": True, "retry_after": 1},
        {"action": "status", "code": 429, "retry_after": 1},
        {"action": "status", "code": 500},
        {"action": "status", "code": 503},
        {"action": "status", "code": 504},
        {"action": "drop"},
        {"action": "hang", "seconds": 5},
    ],
    ids=["429-text", "429-status", "500", "503", "504", "dropped", "timeout"],
)
def test_transient_answers_are_retried_then_succeed(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, fault: dict[str, Any]
) -> None:
    add_execution(execs, kube, "a")
    kube.inject(method="DELETE", times=2, **fault)
    with DaemonThread(daemon_settings(db_url, kube, request_timeout=1.0)):
        retire(execs, "a")
        row = wait_until(lambda: finished(execs, "a"), timeout=20)
    # A 429 is the server's load, not the row's trouble: waited out, never charged. No answer or a 5xx
    # while the server answers its health check is the row's own, and charged.
    charged = fault.get("code") != 429
    assert (row["outcome"], row["attempts"]) == ("deleted", 3 if charged else 1)
    assert len(kube.deletes()) == 3  # exactly ours: the client itself retried nothing
    history = execs.execute(
        "SELECT claim_epoch, replica, result, http_status, reason, recorded, duration_ms, error"
        " FROM pod_sweeper.attempts WHERE outbox_id = %s ORDER BY id",
        (row["id"],),
    ).fetchall()
    again = "retry" if charged else "handed_back"
    assert [(h["claim_epoch"], h["result"], h["recorded"]) for h in history] == [
        (1, again, True),
        (2, again, True),
        (3, "deleted", True),
    ]
    assert history[-1]["http_status"] == 200 and all(h["replica"] == "test-replica" for h in history)
    # last_error says why a row is not done: this one is, so it has none; its history keeps the errors.
    assert (row["last_error"], row["last_http_status"]) == (None, 200)
    assert all(h["error"] for h in history[:2])
    expected_status = fault.get("code")
    assert all(h["http_status"] == expected_status for h in history[:2])
    assert all(h["reason"] for h in history[:2])  # the API's reason, or the transport error's kind
    if fault.get("retry_after"):
        first, second = kube.deletes()[:2]
        assert second.at - first.at >= 0.95  # Retry-After honoured over the 0.2 s backoff cap


def test_retries_run_out_and_the_row_goes_dead_with_its_last_error(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    kube.inject("status", method="DELETE", code=503, times=None)
    with DaemonThread(daemon_settings(db_url, kube, max_attempts=3)):
        retire(execs, "a")
        row = wait_until(lambda: finished(execs, "a"), timeout=20)
    assert (row["status"], row["attempts"], row["last_http_status"]) == ("dead", 3, 503)
    assert "ServiceUnavailable" in row["last_error"]
    assert len(kube.deletes()) == 3


def test_other_4xx_is_dead_at_once(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_execution(execs, kube, "a")
    kube.inject("status", method="DELETE", code=422, reason="Invalid")
    with DaemonThread(daemon_settings(db_url, kube)):
        retire(execs, "a")
        row = wait_until(lambda: finished(execs, "a"))
    assert (row["status"], row["attempts"], row["last_http_status"]) == ("dead", 1, 422)
    assert kube.get_pod("sandboxes", "pod-a-1") is not None


def test_forbidden_charges_nothing_and_says_which_permission(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    kube.denied.add(("delete", "sandboxes"))
    with DaemonThread(daemon_settings(db_url, kube, backoff_base=0.5, backoff_max=1.0)) as daemon:
        retire(execs, "a")
        wait_until(lambda: kube.deletes(), what="the refused DELETE")
        wait_until(lambda: (row_for(execs, "a") or {}).get("status") == "pending", what="the hand-back")
        row = row_for(execs, "a")
        assert row is not None and row["attempts"] == 0
        assert "needs 'delete'" in row["last_error"] and row["last_http_status"] == 403
        assert "sandboxes" in daemon.daemon.sweeper.status.refused_namespaces
        assert daemon.daemon.ready  # a namespace's refusal is not the replica's
        kube.denied.clear()
        done = wait_until(lambda: finished(execs, "a"), timeout=20)
        assert daemon.daemon.metrics.value("pod_sweeper_namespace_refused", pod_namespace="sandboxes") == 0
    assert (done["outcome"], done["attempts"]) == ("deleted", 1)


def test_a_refused_namespace_waits_alone_and_the_replica_stays_ready(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """One namespace answers 403: its rows wait uncharged, with a backoff that grows to its maximum (a
    handful of requests, not a loop); rows of every other namespace are deleted at once; ready throughout."""
    for i in range(3):
        add_execution(execs, kube, f"bad{i}", namespace="forbidden")
    kube.denied.add(("delete", "forbidden"))
    settings = daemon_settings(db_url, kube, backoff_base=0.2, backoff_max=1.0, poll_interval=0.5)
    with DaemonThread(settings) as daemon:
        execs.execute("UPDATE executions SET active = false WHERE sandbox_id LIKE 'bad%'")
        wait_until(lambda: daemon.daemon.metrics.value("pod_sweeper_namespace_refused", pod_namespace="forbidden") == 1)
        started = time.monotonic()
        ready = []
        for i in range(20):
            add_execution(execs, kube, f"ok{i}")
            retire(execs, f"ok{i}")
            # Seconds, not the refused namespace's backoff: generous for a loaded machine, still far
            # below what waiting behind the refusal (a replica gone unready) would take.
            wait_until(lambda i=i: finished(execs, f"ok{i}"), timeout=5, what="a row of another namespace")
            ready.append(daemon.daemon.ready)
        elapsed = time.monotonic() - started
        refused = [r for r in kube.deletes() if "/namespaces/forbidden/" in r.path]
        assert all(ready), "the replica went not ready over one namespace's refusal"
        # Each refused row is tried at most once per backoff (at most 1 s here) after the first closing.
        assert len(refused) <= 3 * (elapsed / 0.2 + 2), len(refused)
    # Read once the replica has stopped: while it runs, a refused row may be in its next try (claimed).
    rows = [row_for(execs, f"bad{i}") for i in range(3)]
    assert all(r is not None and r["status"] == "pending" and r["attempts"] == 0 for r in rows), rows
    assert all(r is not None and r["last_http_status"] == 403 and "forbidden" in r["last_error"] for r in rows)
    assert all(kube.get_pod("forbidden", f"pod-bad{i}-1") is not None for i in range(3))


def test_a_row_outside_the_namespace_scope_is_dead_without_a_request(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "inside")
    add_execution(execs, kube, "system", namespace="kube-system")
    add_execution(execs, kube, "elsewhere", namespace="other")
    with DaemonThread(daemon_settings(db_url, kube, namespaces="sandboxes,other")) as daemon:
        for sid in ("inside", "system", "elsewhere"):
            retire(execs, sid)
        for sid in ("inside", "system", "elsewhere"):
            wait_until(lambda sid=sid: finished(execs, sid), what=f"row {sid} finished")
        assert daemon.daemon.metrics.value("pod_sweeper_unsendable_rows_total", why="out_of_scope") == 1
    system = row_for(execs, "system")
    assert system is not None and (system["status"], system["attempts"]) == ("dead", 1)
    assert "outside POD_SWEEPER_NAMESPACES (other, sandboxes)" in system["last_error"]
    assert kube.get_pod("kube-system", "pod-system-1") is not None
    assert sorted(r.path.split("/")[4] for r in kube.deletes()) == ["other", "sandboxes"]  # none to kube-system


def test_bad_token_is_unauthorized_and_charges_nothing(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, tmp_path: Any
) -> None:
    add_execution(execs, kube, "a")
    wrong = kube.write_kubeconfig(tmp_path / "wrong", token="not-the-token")
    with DaemonThread(daemon_settings(db_url, kube, kubeconfig=wrong, backoff_base=5.0, backoff_max=10.0)):
        retire(execs, "a")
        wait_until(lambda: kube.deletes(), what="the refused DELETE")
        wait_until(lambda: (row_for(execs, "a") or {}).get("last_http_status") == 401, what="the hand-back")
    row = row_for(execs, "a")
    assert row is not None and (row["status"], row["attempts"]) == ("pending", 0)
    assert "credentials" in row["last_error"]


def test_a_refusal_leaves_the_rest_of_its_chunk_unsent_and_uncharged(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, tmp_path: Any
) -> None:
    # One worker and a deep queue: rows go to its thread several at a time. After a 401 the thread
    # must not send the others of its chunk into the same refusal; all are handed back uncharged.
    seed_executions(execs, kube, 40)
    execs.execute("UPDATE executions SET active = false")
    wrong = kube.write_kubeconfig(tmp_path / "wrong", token="not-the-token")
    settings = daemon_settings(
        db_url, kube, kubeconfig=wrong, concurrency=1, batch_size=40, backoff_base=5.0, backoff_max=10.0
    )
    daemon = DaemonThread(settings).start(ready=False)  # refused by Kubernetes: rightly not ready
    try:
        wait_until(
            lambda: execs.execute(
                "SELECT count(*) = 40 AS all_back FROM pod_sweeper.outbox"
                " WHERE status = 'pending' AND attempts = 0 AND claim_epoch >= 1"
            ).fetchone()["all_back"],
            what="every claimed row handed back",
        )
        assert [d.status for d in kube.deletes()] == [401]
    finally:
        assert daemon.stop() == 0


def test_poll_only_mode_drains(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    for sid in "abc":
        add_execution(execs, kube, sid)
    with DaemonThread(daemon_settings(db_url, kube, listen=False, poll_interval=0.3)):
        execs.execute("UPDATE executions SET active = false")
        wait_until(lambda: all(finished(execs, s) for s in "abc"), timeout=10)
    assert kube.pods == {}


def test_killed_listener_backend_still_drains_and_reconnects(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    add_execution(execs, kube, "b")
    with DaemonThread(daemon_settings(db_url, kube, poll_interval=0.5)) as daemon:
        listener = daemon.daemon.listener
        execs.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pod-sweeper-listener'"
        )
        retire(execs, "a")
        wait_until(lambda: finished(execs, "a"), timeout=10, what="the poll to drain without the listener")
        reconnects = daemon.daemon.metrics.value
        wait_until(
            lambda: reconnects("pod_sweeper_listener_reconnects_total") >= 1 and listener.healthy,
            timeout=10,
            what="the listener to return",
        )
        started = time.monotonic()
        retire(execs, "b")
        wait_until(lambda: finished(execs, "b"), timeout=5)
        assert time.monotonic() - started < 2


def test_sigterm_style_drain_hands_unfinished_claims_back(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    for sid in "abcd":
        add_execution(execs, kube, sid)
    kube.inject("delay", method="DELETE", seconds=3, times=None)
    daemon = DaemonThread(daemon_settings(db_url, kube, shutdown_timeout=0.5, lease_seconds=30)).start()
    execs.execute("UPDATE executions SET active = false")
    wait_until(lambda: len(kube.deletes()) >= 1, what="deletes in flight")
    assert daemon.stop() == 0
    rows = execs.execute("SELECT status, attempts, outcome FROM pod_sweeper.outbox").fetchall()
    # Whatever did not finish went back to pending, uncharged, claimable at once.
    assert all(r["status"] == "pending" and r["attempts"] == 0 for r in rows if r["outcome"] is None), rows
    claimable = execs.execute("SELECT claimable FROM pod_sweeper.lag").fetchone()["claimable"]
    assert claimable == sum(1 for r in rows if r["status"] == "pending")


def test_stale_replica_cannot_overwrite_the_new_owners_outcome(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    retire(execs, "a")

    async def scenario() -> tuple[set[int], set[int]]:
        async with db.connection(settings_for(db_url)) as conn:
            stale = (await claim(conn, owner="frozen", batch=10, lease_seconds=5)).to_send[0]
            await conn.execute("UPDATE pod_sweeper.outbox SET next_attempt_at = now() - interval '1 s'")
            fresh = (await claim(conn, owner="alive", batch=10, lease_seconds=5)).to_send[0]
            assert fresh.epoch == stale.epoch + 1 and fresh.attempts == 2
            assert fresh.lease_expired_from == "frozen" and stale.lease_expired_from is None
            took = await outbox.record_results(
                conn, [Verdict(fresh.id, fresh.epoch, Result.ABSENT, http_status=404)], "alive", cluster=DEFAULT_CLUSTER
            )
            refused = await outbox.record_results(
                conn,
                [Verdict(stale.id, stale.epoch, Result.DEAD, error="woke up late")],
                "frozen",
                cluster=DEFAULT_CLUSTER,
            )
            return took, refused

    took, refused = run(scenario())
    assert refused == set() and len(took) == 1
    row = row_for(execs, "a")
    assert row is not None and (row["status"], row["outcome"], row["claimed_by"]) == ("done", "absent", "alive")


def test_expired_lease_with_no_attempts_left_goes_dead(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_execution(execs, kube, "a")
    retire(execs, "a")
    execs.execute(
        "UPDATE pod_sweeper.outbox SET status = 'claimed', claimed_by = 'crashed', attempts = 5,"
        " next_attempt_at = now() - interval '1 s'"
    )
    with DaemonThread(daemon_settings(db_url, kube, max_attempts=5)):
        row = wait_until(lambda: finished(execs, "a"))
    assert row["status"] == "dead" and "lease of crashed expired after 5 attempts" in row["last_error"]
    assert kube.deletes() == []


def test_a_dropped_host_table_leaves_rows_for_retry_not_deleted(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    retire(execs, "a")
    execs.execute("DROP TABLE executions")
    with DaemonThread(daemon_settings(db_url, kube, max_attempts=2)):
        row = wait_until(lambda: finished(execs, "a"), timeout=15)
    assert row["status"] == "dead" and "table or key columns are gone" in row["last_error"]
    assert kube.deletes() == []


def _retire_both_and_drop_others(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> str:
    """Sandbox a in executions and b in a second table, others, attached: the caller retires both in one
    host transaction that also drops others, so that the row of b names a table that is gone by the time
    any claim reads it (while attachments loaded before still say it fits). b's pod UID."""
    create_executions(execs, "public.others")
    run(attach_table(db_url, "public.others"))
    add_execution(execs, kube, "a")
    pod = kube.create_pod("sandboxes", "pod-b-1", labels={"sandbox": "b"})
    execs.execute(
        "INSERT INTO others (sandbox_id, generation, pod_namespace, pod_name, pod_uid) VALUES ('b', 1, %s, %s, %s)",
        ("sandboxes", "pod-b-1", pod["metadata"]["uid"]),
    )
    return str(pod["metadata"]["uid"])


def test_a_bare_recheck_that_fails_rolls_the_whole_claim_back_and_a_contained_one_only_its_tables_rows(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    _retire_both_and_drop_others(execs, db_url, kube)

    async def scenario() -> None:
        async with db.connection(settings_for(db_url)) as conn:
            attachments = await load_attachments(conn)
            with execs.transaction():
                execs.execute("UPDATE executions SET active = false")
                execs.execute("UPDATE others SET active = false")
                execs.execute("DROP TABLE others")
            params: dict[str, Any] = {
                "cluster": DEFAULT_CLUSTER,
                "owner": "t",
                "batch": 10,
                "lease_seconds": 30,
                "attachments": attachments,
                "disarm": True,
                "at_claim": lambda c, checked: None,
            }
            with pytest.raises(BareLookupFailed, match=r"the re-check of public\.others failed: .*others"):
                await outbox.claim(conn, **params, contain=False)
            untouched = execs.execute("SELECT status, attempts FROM pod_sweeper.outbox ORDER BY sandbox_id").fetchall()
            assert [(r["status"], r["attempts"]) for r in untouched] == [("pending", 0), ("pending", 0)]
            decided: dict[str, Any] = {}

            def at_claim(claim: Any, checked: Any) -> None:
                decided[claim.sandbox_id] = (claim.id in checked.active, checked.unknown.get(claim.id))

            batch = await outbox.claim(conn, **{**params, "at_claim": at_claim}, contain=True)
            assert sorted(c.sandbox_id for c in batch.to_send) == ["a", "b"]
            assert decided["a"] == (False, None)  # looked up, retired: its table answered
            assert decided["b"][0] is False and "re-check failed" in decided["b"][1] and "others" in decided["b"][1]

    run(scenario())


def test_a_host_table_dropped_under_a_running_daemon_costs_one_claim_then_only_its_own_rows_wait(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    # The daemon's re-check runs without savepoints (two round trips fewer a claim) until a lookup fails
    # (store/sweep/pgstore.py): that turn rolls back whole, nothing claimed or charged, and from the next
    # one on each table's lookup is contained, so a's pod is deleted and only b's row waits.
    b_uid = _retire_both_and_drop_others(execs, db_url, kube)
    with DaemonThread(daemon_settings(db_url, kube)) as daemon:
        wait_until(lambda: sleeping(daemon), what="the daemon asleep, both tables loaded as fitting")
        with execs.transaction():
            execs.execute("UPDATE executions SET active = false")
            execs.execute("UPDATE others SET active = false")
            execs.execute("DROP TABLE others")
        row = wait_until(lambda: finished(execs, "a"), timeout=15)
        b = wait_until(
            lambda: (r := row_for(execs, "b")) is not None and "re-check failed" in (r["last_error"] or "") and r,
            what="b's row waiting on its failed re-check",
        )
        assert daemon.daemon.metrics.value("pod_sweeper_db_errors_total") == 1  # the one bare turn lost
        assert daemon.daemon.sweeper.claimer.store.contain_rechecks
    assert (row["status"], row["outcome"], row["attempts"]) == ("done", "deleted", 1)
    assert b["status"] in ("pending", "dead") and "others" in b["last_error"]
    assert [d.path.rsplit("/", 1)[-1] for d in kube.deletes()] == ["pod-a-1"]
    assert ("sandboxes", "pod-b-1") in kube.pods and kube.pods["sandboxes", "pod-b-1"]["metadata"]["uid"] == b_uid


def test_two_replicas_on_2000_rows_finish_each_exactly_once(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    seed_executions(execs, kube, 2000)
    first = DaemonThread(daemon_settings(db_url, kube, replica_id="r1", batch_size=50)).start()
    second = DaemonThread(daemon_settings(db_url, kube, replica_id="r2", batch_size=50)).start()
    try:
        execs.execute("UPDATE executions SET active = false")
        wait_until(
            lambda: (
                execs.execute("SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done'").fetchone()["n"]
                == 2000
            ),
            timeout=120,
            what="2000 rows done",
        )
    finally:
        assert first.stop() == 0 and second.stop() == 0
    by = execs.execute("SELECT outcome, attempts, count(*) AS n FROM pod_sweeper.outbox GROUP BY 1, 2").fetchall()
    assert [(r["outcome"], r["attempts"], r["n"]) for r in by] == [("deleted", 1, 2000)]
    statuses = [d.status for d in kube.deletes()]
    assert statuses.count(200) == 2000 and len(statuses) == 2000  # no row deleted twice
    owners = execs.execute("SELECT claimed_by, count(*) AS n FROM pod_sweeper.outbox GROUP BY 1").fetchall()
    assert {r["claimed_by"] for r in owners} <= {"r1", "r2"}
    assert kube.pods == {}


def test_wake_sources_are_counted(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_execution(execs, kube, "a")
    with DaemonThread(daemon_settings(db_url, kube)) as daemon:
        metrics = daemon.daemon.metrics
        wait_until(lambda: sleeping(daemon), what="the replica asleep")
        retire(execs, "a")
        wait_until(lambda: finished(execs, "a"))
        wait_until(lambda: metrics.value("pod_sweeper_wakeups_total", source="notify") >= 1)
        assert metrics.value("pod_sweeper_outcomes_total", outcome="deleted") == 1
        assert metrics.value("pod_sweeper_kube_responses_total", code="200") == 1
        assert metrics.value("pod_sweeper_delete_duration_seconds_count") == 1


def test_claimer_wakes_at_the_next_due_time_not_the_poll(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    retire(execs, "a")
    execs.execute("UPDATE pod_sweeper.outbox SET next_attempt_at = now() + interval '2 s'")  # in backoff
    with DaemonThread(daemon_settings(db_url, kube, poll_interval=30.0)):
        started = time.monotonic()
        row = wait_until(lambda: finished(execs, "a"), timeout=10)
        assert time.monotonic() - started < 5  # due after 2 s; the poll would have taken 30 s
    assert row["outcome"] == "deleted"


def test_a_failing_next_due_lookup_rolls_its_turn_back_whole_and_charges_nothing(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next due time is read in the claim's own transaction (one commit a turn): a lookup that fails
    takes the turn's claim back with it, so its rows are neither sent nor charged nor stranded under a
    lease; the turn after it claims them again."""
    add_execution(execs, kube, "a")
    real, failures, retired = outbox.next_due, [0], threading.Event()

    async def lost_twice(conn: Any, **kwargs: Any) -> outbox.Due:
        if retired.is_set() and failures[0] < 2:
            failures[0] += 1
            raise psycopg.OperationalError("the connection was lost (test)")
        return await real(conn, **kwargs)

    monkeypatch.setattr(outbox, "next_due", lost_twice)
    with DaemonThread(daemon_settings(db_url, kube, poll_interval=30.0)):
        retired.set()
        retire(execs, "a")
        row = wait_until(lambda: finished(execs, "a"), timeout=5, what="the row to be sent once a turn commits")
    assert failures[0] == 2
    assert (row["outcome"], row["attempts"]) == ("deleted", 1)  # the two turns rolled back charged nothing
    assert len(kube.deletes()) == 1  # and sent nothing


def test_names_kubernetes_would_reject_go_dead_without_blocking_others(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "good")
    for sid, namespace, name in (
        ("bad-ns", "Bad_NS", "p"),
        ("bad-name", "sandboxes", "Pod;drop"),
        ("long", "sandboxes", "p" * 300),
    ):
        execs.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
            " VALUES (%s, 1, %s, %s, gen_random_uuid(), false)",
            (sid, namespace, name),
        )
    with DaemonThread(daemon_settings(db_url, kube)):
        retire(execs, "good")
        good = wait_until(lambda: finished(execs, "good"))
        bad = [wait_until(lambda s=s: finished(execs, s)) for s in ("bad-ns", "bad-name", "long")]
    assert good["outcome"] == "deleted"
    assert [b["status"] for b in bad] == ["dead", "dead", "dead"]
    assert "not a valid Kubernetes namespace" in bad[0]["last_error"]
    assert "not a valid Kubernetes object name" in bad[1]["last_error"]
    assert [d.path for d in kube.deletes()] == ["/api/v1/namespaces/sandboxes/pods/pod-good-1"]


def test_ready_after_the_first_catch_up_claim_not_after_the_whole_backlog(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    for i in range(100):
        add_execution(execs, kube, f"b{i}")
    execs.execute("UPDATE executions SET active = false")
    kube.inject("delay", method="DELETE", seconds=0.05, times=None)
    with DaemonThread(daemon_settings(db_url, kube, concurrency=2, batch_size=10)) as daemon:
        assert daemon.daemon.ready
        left = execs.execute("SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status <> 'done'").fetchone()["n"]
        assert left > 50  # ready long before the backlog is drained
