"""An API server that cannot be reached never kills a row: held down longer than the whole attempt
budget, every row waits uncharged, nothing goes out but probes whose spacing grows, the outage shows
in readiness, the gauge, the outage table and `status`, and every pod is deleted once the server is
back. A 5xx while the server answers its health check stays the row's own trouble, and is charged."""

from __future__ import annotations

import itertools
from typing import Any

import psycopg
import pytest

from helpers import DaemonThread, add_execution, daemon_settings, retire, run, settings_for, wait_until
from pod_sweeper.core.backoff import retry_span
from pod_sweeper.store import db
from pod_sweeper.store.reads import status

pytestmark = pytest.mark.versions

OUTAGES = {
    # connections dropped without an answer, health check included: a server that is gone
    "dropped": {"action": "drop"},
    # every request, health check included, answered 503: a server whose etcd is gone
    "503-everywhere": {"action": "status", "code": 503},
}


def counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute("SELECT status, count(*) AS n FROM pod_sweeper.outbox GROUP BY status").fetchall()
    return {r["status"]: r["n"] for r in rows}


def read_status(url: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        async with db.connection(settings_for(url)) as conn:
            return await status.read_status(conn)

    result: dict[str, Any] = run(read())
    return result


@pytest.mark.parametrize("fault", list(OUTAGES.values()), ids=list(OUTAGES))
def test_an_outage_longer_than_the_attempt_budget_kills_no_row(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, fault: dict[str, Any]
) -> None:
    settings = daemon_settings(db_url, kube, max_attempts=3, backoff_base=0.1, backoff_max=1.0, request_timeout=1.0)
    budget = retry_span(settings.backoff_base, settings.backoff_max, settings.max_attempts).longest
    for i in range(12):
        add_execution(execs, kube, f"s{i}")
    with DaemonThread(settings) as daemon:
        outage = kube.inject(times=None, **fault)  # every request, the health check too
        for i in range(12):
            retire(execs, f"s{i}")
        wait_until(lambda: not daemon.daemon.ready, what="readiness to follow the outage")
        reason = daemon.daemon.health.readiness()[1]
        assert "the Kubernetes API server cannot be reached" in reason, reason
        metrics = daemon.daemon.metrics
        assert metrics.value("pod_sweeper_kube_unreachable", pod_cluster="default") == 1
        wait_until(
            lambda: execs.execute("SELECT count(*) AS n FROM pod_sweeper.outages").fetchone()["n"] == 1,
            what="the outage recorded in the database",
        )
        # Requests already at the API when the gate closed end (each row handed back) before the count
        # is taken: from then on, nothing but probes may go out.
        claimed = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'claimed'"
        wait_until(lambda: execs.execute(claimed).fetchone()["n"] == 0, what="every row handed back")
        deletes_when_closed = len(kube.deletes())
        # Held down for many times the whole attempt budget (what three attempts could span).
        probes = lambda: [r.at for r in kube.requests if r.path == "/readyz"]  # noqa: E731
        wait_until(lambda: len(probes()) >= 6, timeout=30, what="six probes")
        wait_until(lambda: probes()[-1] - probes()[0] > 4 * budget, timeout=30, what="an outage over the budget")
        assert len(kube.deletes()) == deletes_when_closed  # nothing but probes went out
        seen = probes()
        gaps = [b - a for a, b in itertools.pairwise(seen)]
        assert max(gaps[-2:]) > 2 * min(gaps[:2]), gaps  # the probes come less often as it lasts
        assert all(gap <= settings.backoff_max + 0.5 for gap in gaps)  # never less often than the cap
        shown = read_status(db_url)
        assert [o["cluster"] for o in shown["outages"]] == ["default"]
        assert counts(execs).get("dead", 0) == 0
        assert not daemon.daemon.ready  # throughout
        kube.faults.remove(outage)  # the server answers again
        done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done' AND outcome = 'deleted'"
        wait_until(lambda: execs.execute(done).fetchone()["n"] == 12, timeout=20, what="every pod deleted")
        wait_until(lambda: daemon.daemon.ready, what="ready again")
        assert metrics.value("pod_sweeper_kube_unreachable", pod_cluster="default") == 0
        wait_until(
            lambda: execs.execute("SELECT count(*) AS n FROM pod_sweeper.outages").fetchone()["n"] == 0,
            what="the outage row cleared",
        )
    rows = execs.execute("SELECT status, attempts, last_error FROM pod_sweeper.outbox").fetchall()
    assert {(r["status"], r["attempts"], r["last_error"]) for r in rows} == {("done", 1, None)}  # never charged
    held = execs.execute(
        "SELECT count(*) AS n FROM pod_sweeper.attempts WHERE result = 'handed_back' AND error LIKE %s",
        ("%cannot be reached%",),
    ).fetchone()["n"]
    assert held >= 1  # the rows in hand when it closed, with the reason in their history
    assert all(kube.get_pod("sandboxes", f"pod-s{i}-1") is None for i in range(12))


def test_an_api_server_unreachable_at_start_is_not_ready_until_it_answers(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """A kubeconfig that points at a server that does not answer: not ready from the start, even with
    no row to send."""
    outage = kube.inject("drop", times=None)
    daemon = DaemonThread(daemon_settings(db_url, kube, backoff_max=0.5)).start(ready=False)
    try:
        wait_until(lambda: daemon.daemon.health.started, what="the start-up catch-up claim")
        wait_until(lambda: daemon.daemon.outage is not None and not daemon.daemon.outage.open, what="the probe")
        assert not daemon.daemon.ready
        assert "the Kubernetes API server cannot be reached" in daemon.daemon.health.readiness()[1]
        kube.faults.remove(outage)
        wait_until(lambda: daemon.daemon.ready, what="ready once a probe is answered")
    finally:
        assert daemon.stop() == 0


def test_one_rows_5xx_while_the_server_answers_is_charged(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """The line: a 5xx for one pod while the server answers its health check and other requests is
    the row's own trouble (a failing admission webhook for that pod, say), charged until it is dead."""
    add_execution(execs, kube, "bad")
    add_execution(execs, kube, "good")
    kube.inject("status", method="DELETE", path="pod-bad-1$", code=500, times=None)
    with DaemonThread(daemon_settings(db_url, kube, max_attempts=3)) as daemon:
        retire(execs, "bad")
        retire(execs, "good")
        finished = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status IN ('done', 'dead')"
        wait_until(lambda: execs.execute(finished).fetchone()["n"] == 2, timeout=20, what="both rows finished")
        assert daemon.daemon.ready
        assert daemon.daemon.metrics.value("pod_sweeper_kube_unreachable", pod_cluster="default") == 0
    by_sid = {r["sandbox_id"]: r for r in execs.execute("SELECT * FROM pod_sweeper.outbox").fetchall()}
    assert (by_sid["bad"]["status"], by_sid["bad"]["attempts"], by_sid["bad"]["last_http_status"]) == ("dead", 3, 500)
    assert (by_sid["good"]["status"], by_sid["good"]["outcome"]) == ("done", "deleted")
