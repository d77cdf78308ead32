"""Chaos scenarios on real PostgreSQL and the fake API server, replicas as real processes. Each one
ends with ``Workload.verify`` (every invariant) and prints what it counted."""

from __future__ import annotations

import random
from typing import Any

import pytest

from chaos.harness import NAMESPACE, Workload, alive, spawn_replica
from helpers import stop_process, wait_until

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("point", ["after_claim", "after_answer", "during_record", "listener"])
def test_sigkill_at_each_failpoint_then_restart(workload: Workload, kube: Any, point: str) -> None:
    sids = workload.seed(200, active_share=0.1)
    kube.inject("delay", method="DELETE", seconds=0.005, times=None)
    # The listener hears one NOTIFY per retire transaction: it dies at the first; the others at their second
    # hit, with some work already done.
    nth = 1 if point == "listener" else 2
    victim = spawn_replica(workload.url, kube.kubeconfig, "victim", POD_SWEEPER_FAILPOINTS=f"{point}=kill@{nth}")
    wait_until(lambda: alive(victim) and workload.listeners() == 1, timeout=30, what="the victim to listen")
    workload.retire(sids)
    assert victim.wait(30) == -9  # it killed itself at the failpoint
    survivor = spawn_replica(workload.url, kube.kubeconfig, "survivor")
    try:
        wait_until(lambda: alive(survivor) and workload.listeners() == 1, timeout=30, what="the survivor to listen")
        wait_until(workload.outbox_done, timeout=60, what="the survivor to drain")
    finally:
        assert stop_process(survivor) == 0
    workload.verify(f"sigkill at {point}")


@pytest.mark.parametrize(
    ("fault", "requests"),
    [
        ({"action": "drop"}, 1000),  # every DELETE dropped: each row meets it about seven times
        ({"action": "status", "code": 500}, 300),
        ({"action": "status", "code": 429, "retry_after": 1}, 300),
        ({"action": "status", "code": 429, "retry_after": 1, "text": True}, 300),
        ({"action": "hang", "seconds": 3}, 16),  # half-open: no answer until the request timeout, twice a worker
    ],
    ids=["dropped", "500s", "429-storm", "429-text-storm", "hanging"],
)
def test_api_outages(workload: Workload, kube: Any, fault: dict[str, Any], requests: int) -> None:
    """The outage lasts until the daemon has sent ``requests`` DELETEs into it (a fact, not a time)."""
    sids = workload.seed(150, active_share=0.1)
    injected = kube.inject(method="DELETE", times=None, **fault)
    # The outage must fit in the attempt budget: with backoff capped at 1 s (the harness's setting)
    # and every row in hand at once, a row is tried about twice a second, so 50 attempts could run out
    # within the 20 s outage and rows go dead, which is right for the daemon but not this scenario.
    replica = spawn_replica(
        workload.url, kube.kubeconfig, "r1", POD_SWEEPER_CONCURRENCY="8", POD_SWEEPER_MAX_ATTEMPTS="500"
    )
    try:
        workload.retire(sids)
        wait_until(lambda: injected.used >= requests, timeout=120, what=f"{requests} DELETEs into the outage")
        assert workload.done() == 0  # nothing finished while the API was failing
        kube.clear_faults()
        wait_until(workload.outbox_done, timeout=60, what="the drain after the outage")
    finally:
        assert stop_process(replica) == 0
    workload.verify(f"api {fault}")


def test_three_replicas_on_10000_rows_with_random_kills(workload: Workload, kube: Any) -> None:
    sids = workload.seed(10_000, active_share=0.02)
    rng = random.Random(11)
    replicas = {f"r{i}": spawn_replica(workload.url, kube.kubeconfig, f"r{i}") for i in range(3)}
    generation = 3
    try:
        workload.retire(sids)
        for kill in range(6):  # a SIGKILL each time another 1,200 rows are done: mid-drain, every time
            wait_until(lambda k=kill: workload.done() >= 1200 * (k + 1), timeout=120, what="the next 1,200 rows")
            name = rng.choice(sorted(replicas))
            replicas[name].kill()  # SIGKILL: no hand-back, leases must expire
            replicas[name].wait(10)
            del replicas[name]
            replicas[f"r{generation}"] = spawn_replica(workload.url, kube.kubeconfig, f"r{generation}")
            generation += 1
        wait_until(workload.outbox_done, timeout=240, what="the backlog to drain")
    finally:
        for proc in replicas.values():
            stop_process(proc)
    counts = workload.verify("3 replicas, 10k rows, 6 SIGKILLs")
    assert counts["rows"] == len(sids)


def test_retire_rerecord_and_delete_in_quick_succession(workload: Workload, kube: Any) -> None:
    replica = spawn_replica(workload.url, kube.kubeconfig, "r1")
    try:
        with workload.conn() as conn:
            for i in range(100):
                sid = f"q{i}"
                first = kube.create_pod(NAMESPACE, sid)
                conn.execute(
                    "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
                    " VALUES (%s, 1, %s, %s, %s)",
                    (sid, NAMESPACE, sid, first["metadata"]["uid"]),
                )
                conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (sid,))
                # The create is retried: a new pod under the same name, its UID recorded on the retired row.
                kube.remove_pod(NAMESPACE, sid)
                second = kube.create_pod(NAMESPACE, sid)
                conn.execute(
                    "UPDATE executions SET pod_uid = %s WHERE sandbox_id = %s", (second["metadata"]["uid"], sid)
                )
                conn.execute("DELETE FROM executions WHERE sandbox_id = %s", (sid,))
                workload.retired[sid] = second["metadata"]["uid"]
                workload.retired[f"{sid}#first"] = first["metadata"]["uid"]
        # Two rows per execution (one per UID); the harness keys by pod name, so compare by hand.
        wait_until(lambda: _all_done(workload, 200), timeout=60, what="200 rows done")
    finally:
        assert stop_process(replica) == 0
    with workload.conn() as conn:
        rows = conn.execute("SELECT pod_name, pod_uid::text AS uid, outcome FROM pod_sweeper.outbox").fetchall()
    by_uid = {r["uid"]: r["outcome"] for r in rows}
    for i in range(100):
        assert by_uid[workload.retired[f"q{i}#first"]] in ("replaced", "absent")
        assert by_uid[workload.retired[f"q{i}"]] == "deleted"
    assert kube.pods == {}
    print(f"\nchaos quick succession: rows {len(rows)}, deletes {len(kube.deletes())}")


def _all_done(workload: Workload, n: int) -> bool:
    with workload.conn() as conn:
        row = conn.execute("SELECT count(*) FILTER (WHERE status = 'done') AS done FROM pod_sweeper.outbox").fetchone()
    return bool(row and row["done"] == n)


def test_replacement_created_between_claim_and_delete(workload: Workload, kube: Any) -> None:
    sids = workload.seed(60)
    replaced: dict[str, str] = {}

    def swap(namespace: str, name: str) -> None:
        # Just before the API server handles the DELETE, someone recreates the pod under its name.
        if int(name[1:]) % 3 == 0 and name not in replaced:
            kube.remove_pod(namespace, name)
            replaced[name] = kube.create_pod(namespace, name)["metadata"]["uid"]

    kube.on_delete = swap
    replica = spawn_replica(workload.url, kube.kubeconfig, "r1")
    try:
        workload.retire(sids)
        wait_until(workload.outbox_done, timeout=60)
    finally:
        assert stop_process(replica) == 0
    workload.survivors.update(replaced)
    counts = workload.verify("replacement between claim and delete")
    assert counts["outcomes"].get("replaced") == len(replaced) == 20


def test_notify_lost_silently_while_retires_keep_arriving(workload: Workload, kube: Any) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from chaos.proxy import FreezingProxy

    sids = workload.seed(120)
    with FreezingProxy(int(conninfo_to_dict(workload.url)["port"])) as proxy:
        via_proxy = make_conninfo(workload.url, port=proxy.port, sslmode="disable")
        replica = spawn_replica(
            via_proxy, kube.kubeconfig, "r1", POD_SWEEPER_NOTIFY_CHECK_INTERVAL="1", POD_SWEEPER_POLL_INTERVAL="2"
        )
        try:
            wait_until(lambda: alive(replica) and workload.listeners() == 1, timeout=30, what="the replica to listen")
            workload.retire(sids[:20])
            wait_until(lambda: _all_done(workload, 20), timeout=10, what="the first retires, by NOTIFY")
            assert proxy.freeze(b"pod-sweeper-listener") == 1  # the listener now hears nothing, and nobody says so
            for i in range(20, 120, 10):  # retires keep arriving, each batch after the last one is done
                batch = sids[i : i + 10]
                workload.retire(batch)
                wait_until(lambda b=batch: workload.done(b) == len(b), timeout=10, what="a batch, by poll")
            wait_until(workload.outbox_done, timeout=30, what="the drain with the listener frozen")
            wait_until(
                lambda: workload.listeners() >= 2,
                timeout=15,
                what="a fresh listener (the frozen one is still open, unanswered)",
            )
        finally:
            assert stop_process(replica) == 0
    counts = workload.verify("NOTIFY lost silently")
    assert counts["rows"] == 120
