"""Kubernetes Events on deleted pods, against the fake (which keeps what it is sent; the real server's
answers are checked in tests/realkube): one per deletion, none for the rows that deleted nothing, best
effort (a refused Event never touches its row), paced, and off with a setting."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from helpers import DaemonThread, add_execution, daemon_settings, retire, row_for, seed_executions, wait_until
from pod_sweeper.tasks.loops import events


def done(conn: psycopg.Connection[Any], n: int) -> bool:
    return bool(
        conn.execute("SELECT count(*) = %s AS ok FROM pod_sweeper.outbox WHERE status = 'done'", (n,)).fetchone()["ok"]
    )


def test_each_deleted_pod_gets_an_event_and_the_others_none(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    uid = add_execution(execs, kube, "gone")
    add_execution(execs, kube, "absent")
    kube.remove_pod("sandboxes", "pod-absent-1")
    add_execution(execs, kube, "replaced")
    kube.remove_pod("sandboxes", "pod-replaced-1")
    kube.create_pod("sandboxes", "pod-replaced-1")
    with DaemonThread(daemon_settings(db_url, kube, events=True)) as daemon:
        for sid in ("gone", "absent", "replaced"):
            retire(execs, sid)
        wait_until(lambda: done(execs, 3), what="three rows done")
        wait_until(lambda: kube.events, what="the event")
        metrics = daemon.daemon.metrics
        wait_until(lambda: metrics.value("pod_sweeper_events_total", result="sent") == 1, what="counted")
    [event] = kube.events
    row = row_for(execs, "gone")
    assert row is not None and row["outcome"] == "deleted"
    assert event["involvedObject"] == {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": "sandboxes",
        "name": "pod-gone-1",
        "uid": uid,
    }
    assert (event["reason"], event["type"], event["action"]) == ("Retired", "Normal", "Delete")
    assert (event["reportingComponent"], event["reportingInstance"]) == ("pod-sweeper", "test-replica")
    assert event["source"] == {"component": "pod-sweeper"}
    assert event["message"] == (
        f"Deleted by pod-sweeper: execution gone generation 1 was retired (outbox row {row['id']}, reason retired)"
    )
    assert event["metadata"]["name"].startswith("pod-gone-1.")


def test_a_refused_event_never_touches_its_row_or_the_namespace(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    kube.denied.add(("create", "sandboxes"))  # RBAC without the events rule
    add_execution(execs, kube, "a")
    add_execution(execs, kube, "b")
    with DaemonThread(daemon_settings(db_url, kube, events=True)) as daemon:
        retire(execs, "a")
        wait_until(lambda: done(execs, 1), what="the first row done")
        metrics = daemon.daemon.metrics
        wait_until(lambda: metrics.value("pod_sweeper_events_total", result="failed") == 1, what="the refusal")
        retire(execs, "b")  # the namespace goes on: an Event's 403 is not the pods'
        wait_until(lambda: done(execs, 2), what="the second row done")
        assert daemon.daemon.ready and not daemon.daemon.sweeper.status.refused_namespaces
    rows = [row_for(execs, sid) for sid in ("a", "b")]
    assert [(r["outcome"], r["attempts"]) for r in rows if r] == [("deleted", 1), ("deleted", 1)]
    assert kube.events == [] and len([r for r in kube.requests if r.path.endswith("/events")]) == 2  # no retry


def test_events_are_paced_and_a_full_queue_drops_and_counts(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "QUEUE_SIZE", 10)
    for i in range(40):
        add_execution(execs, kube, f"s{i}")
    settings = daemon_settings(db_url, kube, events=True, events_qps=2.0)  # a burst of 10, then 2 a second
    with DaemonThread(settings) as daemon:
        started = time.monotonic()
        execs.execute("UPDATE executions SET active = false")
        wait_until(lambda: done(execs, 40), timeout=20, what="40 rows done")  # the rows never wait for Events
        metrics = daemon.daemon.metrics
        wait_until(lambda: metrics.value("pod_sweeper_events_total", result="dropped") > 0, what="drops")
        sent_by = len(kube.events), time.monotonic() - started
        assert sent_by[0] <= 10 + 2 * sent_by[1] + 1, sent_by  # the burst, then the pace
    dropped = metrics.value("pod_sweeper_events_total", result="dropped")
    # Every deletion is sent, queued or counted as dropped (one may have been taken from the queue when
    # the stop cancelled its send).
    assert dropped + len(kube.events) + queued_events(daemon) in (39, 40)


def test_events_off(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    add_execution(execs, kube, "a")
    with DaemonThread(daemon_settings(db_url, kube, events=False)):
        retire(execs, "a")
        wait_until(lambda: done(execs, 1), what="the row done")
    assert kube.events == [] and not [r for r in kube.requests if r.path.endswith("/events")]


def test_events_queued_at_a_stop_are_sent_within_the_shutdown_timeout_and_the_rest_counted(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """A stop with a long queue of Events: they go out at the DELETE rate until the shutdown deadline,
    and every one that cannot is counted as dropped (sent + failed + dropped = the pods deleted)."""
    n = 300
    seed_executions(execs, kube, n)
    kube.inject("delay", method="POST", path="/events$", seconds=0.02, times=None)  # a slow Event path
    settings = daemon_settings(db_url, kube, events=True, events_qps=1.0, shutdown_timeout=1.5, rate_limit_qps=200)
    daemon = DaemonThread(settings).start()
    try:
        execs.execute("UPDATE executions SET active = false")
        wait_until(lambda: done(execs, n), timeout=30, what="every pod deleted")
        metrics = daemon.daemon.metrics
        queued = queued_events(daemon)
        assert queued > 200  # one a second: nearly all still queued when the stop comes
    finally:
        assert daemon.stop() == 0
    sent, failed, dropped = (metrics.value("pod_sweeper_events_total", result=r) for r in ("sent", "failed", "dropped"))
    assert sent + failed + dropped == n  # none vanished uncounted
    assert len(kube.events) == sent and failed == 0
    assert sent > 20 and dropped > 0  # the time left was used, at the DELETE rate, and the rest counted


def queued_events(daemon: Any) -> int:
    """Events waiting in the replica's queue (its Events task's own queue: no surface shows it)."""
    events = daemon.daemon.sweeper.events
    return int(events.queue.qsize()) if events is not None else 0
