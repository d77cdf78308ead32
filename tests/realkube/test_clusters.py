"""Two real API servers, one outbox, a replica per cluster: each pod deleted in its own cluster only,
the same namespace and pod name in both told apart, and each deletion's Event in its own cluster."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conformance.apiserver import core_api, manifest
from harness.kubeapiserver import KubeApiServer
from helpers import DaemonThread, attach_table, cli, daemon_settings, run, wait_until

NS = "sandboxes"


@pytest.fixture(scope="module")
def west(kube_apiserver: KubeApiServer) -> Iterator[KubeApiServer]:
    with KubeApiServer(kube_apiserver.bindir) as server:
        yield server


def retired_events(server: KubeApiServer, namespace: str) -> dict[str, dict[str, Any]]:
    items = json.loads(server.kubectl("get", "events", f"--namespace={namespace}", "-o", "json"))["items"]
    return {e["involvedObject"]["name"]: e for e in items if e["reason"] == "Retired"}


def test_two_clusters_one_outbox(
    kube_apiserver: KubeApiServer, west: KubeApiServer, pg: psycopg.Connection[Any], db_url: str
) -> None:
    east = kube_apiserver
    namespace = f"{NS}-{uuid.uuid4().hex[:6]}"
    pg.execute(
        "CREATE TABLE runs (sandbox_id text PRIMARY KEY, generation int NOT NULL, pod_namespace text NOT NULL,"
        " pod_name text NOT NULL, pod_uid uuid, active bool NOT NULL DEFAULT true, cluster text NOT NULL)"
    )
    run(attach_table(db_url, "public.runs", ["cluster=cluster"]))
    uids: dict[str, str] = {}
    for cluster, server, sid, name in (
        ("east", east, "twin-east", "twin"),
        ("west", west, "twin-west", "twin"),  # the same namespace and name, another cluster, another UID
        ("west", west, "only-west", "only"),
    ):
        server.namespace(namespace)
        uids[sid] = core_api(server.admin_kubeconfig).create_namespaced_pod(namespace, manifest(name)).metadata.uid
        pg.execute(
            "INSERT INTO runs VALUES (%s, 1, %s, %s, %s, true, %s)",
            (sid, namespace, name, uuid.UUID(uids[sid]), cluster),
        )
    replicas = [
        daemon_settings(db_url, server.admin_kubeconfig, cluster=cluster, replica_id=f"{cluster}-1", events=True)
        for cluster, server in (("east", east), ("west", west))
    ]
    with DaemonThread(replicas[0]), DaemonThread(replicas[1]):
        pg.execute("UPDATE runs SET active = false WHERE sandbox_id IN ('twin-east', 'only-west')")
        done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done' AND outcome = 'deleted'"
        wait_until(lambda: pg.execute(done).fetchone()["n"] == 2, timeout=30, what="two pods deleted")
        wait_until(lambda: "twin" in retired_events(east, namespace), timeout=15, what="east's Event")
        wait_until(lambda: "only" in retired_events(west, namespace), timeout=15, what="west's Event")
    east_pods = {p.metadata.name for p in core_api(east.admin_kubeconfig).list_namespaced_pod(namespace).items}
    west_pods = {p.metadata.uid for p in core_api(west.admin_kubeconfig).list_namespaced_pod(namespace).items}
    assert east_pods == set() and west_pods == {uids["twin-west"]}  # west's twin untouched
    assert retired_events(east, namespace)["twin"]["involvedObject"]["uid"] == uids["twin-east"]
    assert set(retired_events(west, namespace)) == {"only"}  # nothing recorded on west's twin
    claimed = {r["sandbox_id"]: r["claimed_by"] for r in pg.execute("SELECT * FROM pod_sweeper.outbox").fetchall()}
    assert claimed == {"twin-east": "east-1", "only-west": "west-1"}


def test_one_clusters_burst_trips_its_breaker_alone_on_the_real_servers(
    kube_apiserver: KubeApiServer, west: KubeApiServer, pg: psycopg.Connection[Any], db_url: str
) -> None:
    """60 retires in east with a budget of 20 a minute trip east's breaker; west's 10 are deleted at
    once and west stays ready; resuming east lets east go on."""
    east = kube_apiserver
    namespace = f"{NS}-{uuid.uuid4().hex[:6]}"
    pg.execute(
        "CREATE TABLE runs (sandbox_id text PRIMARY KEY, generation int NOT NULL, pod_namespace text NOT NULL,"
        " pod_name text NOT NULL, pod_uid uuid, active bool NOT NULL DEFAULT true, cluster text NOT NULL)"
    )
    run(attach_table(db_url, "public.runs", ["cluster=cluster"]))
    for cluster, server, count in (("east", east, 60), ("west", west, 10)):
        server.namespace(namespace)
        core = core_api(server.admin_kubeconfig)
        for i in range(count):
            pod = core.create_namespaced_pod(namespace, manifest(f"{cluster}-{i}"))
            pg.execute(
                "INSERT INTO runs VALUES (%s, 1, %s, %s, %s, true, %s)",
                (f"{cluster}-{i}", namespace, f"{cluster}-{i}", uuid.UUID(pod.metadata.uid), cluster),
            )
    replicas = [
        daemon_settings(db_url, server.admin_kubeconfig, cluster=cluster, replica_id=f"{cluster}-1",
                        max_deletes_per_minute=20)
        for cluster, server in (("east", east), ("west", west))
    ]  # fmt: skip
    deleted = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE cluster = %s AND outcome = 'deleted'"
    with DaemonThread(replicas[0]) as east_replica, DaemonThread(replicas[1]) as west_replica:
        pg.execute("UPDATE runs SET active = false WHERE cluster = 'east'")
        wait_until(lambda: east_replica.daemon.sweeper.status.breaker, timeout=30, what="east's breaker to trip")
        pg.execute("UPDATE runs SET active = false WHERE cluster = 'west'")
        wait_until(lambda: pg.execute(deleted, ("west",)).fetchone()["n"] == 10, timeout=30, what="west's 10")
        assert west_replica.daemon.ready and not east_replica.daemon.ready
        held = pg.execute(deleted, ("east",)).fetchone()["n"]
        assert 10 <= held <= 20
        left = len(core_api(east.admin_kubeconfig).list_namespaced_pod(namespace).items)
        assert left == 60 - held
        resumed = cli("reset-breaker", "--cluster", "east", url=db_url)
        assert resumed.returncode == 0, resumed.stderr
        wait_until(lambda: pg.execute(deleted, ("east",)).fetchone()["n"] > held, timeout=30, what="east resumes")
    assert core_api(west.admin_kubeconfig).list_namespaced_pod(namespace).items == []
