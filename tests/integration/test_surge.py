"""The breaker's surge and transaction rules on PostgreSQL, at the shipped defaults (two replicas, the
default rate limit): one host transaction retiring 5,000 is held before a tenth of it is deleted (its
rows alone: the cluster sweeps on), and a script retiring 5,000 over 10 s trips the breaker before a
tenth of them is deleted; steady churn of 100 retires a second does not trip
it (here for a minute; bench/ runs it for ten); a reset lets the judged rows go. The rules alone, without
I/O: tests/unit/test_surge.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from helpers import DaemonThread, add_execution, cli, run, seed_executions, settings_for, wait_until
from pod_sweeper.core.settings import Settings
from pod_sweeper.store import db
from pod_sweeper.store.sweep import rates

SHIPPED = {
    name: Settings.model_fields[name].default
    for name in ("max_deletes_per_minute", "breaker_surge_factor", "breaker_surge_floor", "breaker_transaction_rows")
}


def accepted(kube: Any) -> int:
    return sum(1 for d in kube.deletes() if d.status == 200)


def tripped(execs: psycopg.Connection[Any]) -> str | None:
    row = execs.execute("SELECT reason FROM pod_sweeper.breaker WHERE cluster = 'default'").fetchone()
    return None if row is None else row["reason"]


def settled(execs: psycopg.Connection[Any]) -> bool:
    return execs.execute("SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'claimed'").fetchone()["n"] == 0


def replicas(db_url: str, kube: Any, n: int = 2, **overrides: Any) -> list[DaemonThread]:
    settings = settings_for(db_url, kubeconfig=kube.kubeconfig, **SHIPPED, **overrides)
    return [DaemonThread(settings.model_copy(update={"replica_id": f"r{i}"})).start() for i in range(n)]


def held(execs: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return list(execs.execute("SELECT * FROM pod_sweeper.large_transactions WHERE ended_at IS NULL").fetchall())


def test_one_transaction_retiring_5000_is_held_before_a_tenth_is_deleted_and_the_rest_sweeps_on(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """The transaction rule holds the transaction, not the cluster: a bad migration's UPDATE of 5,000 is
    found by the first claim of its rows and kept back whole (none sent, none charged), while retires
    of the same cluster one at a time go on being deleted; released, its rows go."""
    seed_executions(execs, kube, 5_000)
    for i in range(3):
        add_execution(execs, kube, f"single{i}", namespace="other")
    daemons = replicas(db_url, kube)
    try:
        execs.execute("UPDATE executions SET active = false WHERE sandbox_id ~ '^s[0-9]+$'")  # a bad migration
        wait_until(lambda: held(execs), timeout=30, what="the transaction to be kept back")
        [large] = held(execs)
        assert large["rows_found"] >= 500 and "one host transaction retired at least" in large["reason"]
        for i in range(3):  # single retires after it, in the same cluster: swept as ever
            execs.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (f"single{i}",))
        wait_until(lambda: accepted(kube) >= 3, timeout=30, what="the single retires to be deleted")
        wait_until(lambda: settled(execs), what="the claims in hand to settle")
        assert accepted(kube) == 3, "pods of the large transaction went"
        assert tripped(execs) is None and all(d.daemon.ready for d in daemons)  # the cluster is not stopped
        pending = execs.execute(
            "SELECT count(*) AS n, max(attempts) AS tries FROM pod_sweeper.outbox WHERE status = 'pending'"
        ).fetchone()
        assert (pending["n"], pending["tries"]) == (5_000, 0)  # nothing charged: the whole transaction waits
        said = cli("release-transaction", str(large["id"]), url=db_url)  # the preview changes nothing
        assert said.returncode == 0 and "5000 open row(s)" in said.stdout and "--yes" in said.stdout, said
        assert held(execs)
        said = cli("release-transaction", str(large["id"]), "--yes", "--actor", "ana", url=db_url)
        assert said.returncode == 0 and "released" in said.stdout, said.stdout + said.stderr
        wait_until(lambda: accepted(kube) >= 3 + 500, timeout=60, what="deletes of its rows after the release")
        assert not held(execs) and tripped(execs) is None
        trail = execs.execute(
            "SELECT actor, command, affected FROM pod_sweeper.audit WHERE command LIKE '%transaction%' ORDER BY id"
        ).fetchall()
        assert trail[0]["command"] == "large transaction kept back" and trail[0]["affected"] >= 500
        assert (trail[-1]["actor"], trail[-1]["command"], trail[-1]["affected"]) == (
            "ana",
            "release-transaction",
            5_000,
        )
    finally:
        assert all(d.stop() == 0 for d in daemons)


def test_a_script_retiring_5000_over_10_s_trips_the_breaker_before_a_tenth_is_deleted(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    seed_executions(execs, kube, 5_000)
    daemons = replicas(db_url, kube)
    # The script starts on a quiet cluster: each listening replica's watch sleeps until a wakeup reaches
    # it (tasks/loops/surge.py), and the script's first retire NOTIFYs one replica only.
    wait_until(lambda: all(d.daemon.surge_watch.quiet for d in daemons), what="every surge watch to go quiet")
    stop = threading.Event()

    def script() -> None:  # 50 transactions a second of 10 retires each, for 10 s
        with psycopg.connect(db_url, autocommit=True) as conn:
            for batch in range(500):
                if stop.is_set():
                    return
                due = start + batch * 0.02
                time.sleep(max(0.0, due - time.monotonic()))  # pacing the writer, not waiting on a result
                conn.execute(
                    "UPDATE executions SET active = false WHERE sandbox_id = ANY(%s)",
                    ([f"s{batch * 10 + i}" for i in range(10)],),
                )

    start = time.monotonic()
    writer = threading.Thread(target=script)
    writer.start()
    try:
        wait_until(lambda: tripped(execs), timeout=30, what="the breaker to trip")
        wait_until(lambda: settled(execs), what="the claims in hand to settle")
        assert accepted(kube) < 500, "a tenth of the script's pods went before the trip"
        assert "retires in 2 s" in (tripped(execs) or "")
    finally:
        stop.set()
        writer.join()
        assert all(d.stop() == 0 for d in daemons)


@pytest.mark.parametrize("rate", [100])
def test_steady_churn_never_trips_the_breaker(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, rate: int
) -> None:
    seconds = 60
    total = rate * seconds
    seed_executions(execs, kube, total)
    daemons = replicas(db_url, kube, n=3)  # docs/operations.md, "Sizing": 3 replicas for 100 a second
    start = time.monotonic()
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(total):  # one retire a transaction, as a control plane does
            time.sleep(max(0.0, start + i / rate - time.monotonic()))  # pacing the writer
            conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (f"s{i}",))
            if i % rate == 0:
                assert tripped(execs) is None, f"tripped after {i} retires: {tripped(execs)}"
    try:
        wait_until(lambda: accepted(kube) == total, timeout=60, what="every pod to be deleted")
        assert tripped(execs) is None

        async def read() -> list[rates.ClusterRates]:
            async with db.connection(settings_for(db_url)) as conn:
                return await rates.cluster_rates(conn)

        # The last minute's arrivals and sweeps, as the gauges and status show them: about the rate.
        (default,) = run(read())
        assert rate * 0.6 <= default.arrival_rate <= rate * 1.2
        assert rate * 0.6 <= default.sweep_rate <= rate * 1.2
    finally:
        assert all(d.stop() == 0 for d in daemons)


def test_retires_no_replica_may_delete_now_add_nothing_to_the_surge(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """What the surge watch reads (sql/breaker_arrivals.sql) counts only retires a replica may delete now:
    none kept by a pause or a hold, none in a namespace swept in dry run, none recorded would_delete, and
    none of a host transaction the transaction rule judges."""
    execs.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason) SELECT 1, 's' || g, 1, CASE WHEN g <= 30 THEN 'x' ELSE 'y' END, 'p' || g, gen_random_uuid(),"
        " 'retired' FROM generate_series(1, 50) g"
    )

    async def arrived(**scope: Any) -> int:
        async with db.connection(settings_for(db_url)) as conn:
            seen = await rates.arrivals(conn, cluster="default", window=60, **scope)
        assert seen is not None
        return seen.arrived

    assert run(arrived()) == 50
    # the 50 share one host transaction's start: of 40 or more, they are the transaction rule's, not the surge's
    assert run(arrived(transaction_rows=40)) == 0 and run(arrived(transaction_rows=60)) == 50
    assert run(arrived(shadow=["x"])) == 20 and run(arrived(dry_run=True)) == 0
    execs.execute(
        "INSERT INTO pod_sweeper.pauses (cluster, pod_namespace, reason, actor, until)"
        " VALUES ('default', 'x', 'risky script', 'ana', now() + interval '1 hour')"
    )
    assert run(arrived()) == 20
    execs.execute(
        "INSERT INTO pod_sweeper.holds (cluster, pod_namespace, pod_name, reason, actor, until)"
        " VALUES ('default', 'y', 'p40', 'forensics', 'bo', now() + interval '1 hour')"
    )
    assert run(arrived()) == 19
    execs.execute(
        "UPDATE pod_sweeper.outbox SET status = 'done', outcome = 'would_delete', done_at = now()"
        " WHERE pod_name = 'p41'"
    )
    assert run(arrived()) == 18


def test_a_burst_of_3000_into_a_paused_namespace_trips_nothing(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """An on-call pauses namespace x before a risky script; the script retires 3,000 there in a second
    (thirty transactions of 100, each under the transaction rule), while another namespace's steady churn
    keeps every surge watch awake and looking. Nothing trips; the paused rows wait, none sent; the other
    namespace's pods are all deleted. (A script of that rate unpaused trips the breaker:
    test_a_script_retiring_5000_over_10_s_trips_the_breaker_before_a_tenth_is_deleted.)"""
    seed_executions(execs, kube, 3_000, namespace="x")
    churn = 100
    for i in range(1, churn + 1):
        add_execution(execs, kube, f"c{i}")
    paused = execs.execute(  # as `pod-sweeper pause --namespace x` writes it
        "INSERT INTO pod_sweeper.pauses (cluster, pod_namespace, reason, actor, until)"
        " VALUES ('default', 'x', 'risky script', 'ana', now() + interval '1 hour')"
    )
    assert paused.rowcount == 1
    daemons = replicas(db_url, kube)
    start = time.monotonic()
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            for i in range(churn):  # 20 retires a second in sandboxes for 5 s, the burst into x at 1 s
                time.sleep(max(0.0, start + i / 20 - time.monotonic()))  # pacing the writer
                conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (f"c{i + 1}",))
                if i == 20:
                    for batch in range(30):
                        conn.execute(
                            "UPDATE executions SET active = false WHERE sandbox_id = ANY(%s)",
                            ([f"s{batch * 100 + j}" for j in range(100)],),
                        )
        wait_until(
            lambda: accepted(kube) == churn or tripped(execs), timeout=60, what="the other namespace's pods deleted"
        )
        assert tripped(execs) is None
        waiting = execs.execute(
            "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE pod_namespace = 'x' AND status = 'pending'"
            " AND attempts = 0"
        ).fetchone()
        assert waiting["n"] == 3_000
    finally:
        assert all(d.stop() == 0 for d in daemons)
