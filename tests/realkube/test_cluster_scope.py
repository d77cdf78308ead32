"""A replica acts only on its own cluster's rows (docs/design.md), on two real API servers sharing one
outbox, each time with one cluster's replica down while the other's works: the confirmer, the dry-run
switch, retention, backfill and the bulk commands."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conformance.apiserver import core_api, manifest
from harness.kubeapiserver import KubeApiServer
from helpers import DaemonThread, attach_table, cli, daemon_settings, run, wait_until


@pytest.fixture(scope="module")
def west(kube_apiserver: KubeApiServer) -> Iterator[KubeApiServer]:
    with KubeApiServer(kube_apiserver.bindir) as server:
        yield server


class Host:
    """The host table of both clusters, and a pod for each of its rows on its cluster's server."""

    def __init__(self, pg: psycopg.Connection[Any], servers: dict[str, KubeApiServer]) -> None:
        self.pg, self.servers, self.namespace = pg, servers, f"scope-{uuid.uuid4().hex[:6]}"
        pg.execute(
            "CREATE TABLE runs (sandbox_id text PRIMARY KEY, generation int NOT NULL, pod_namespace text NOT NULL,"
            " pod_name text NOT NULL, pod_uid uuid, active bool NOT NULL DEFAULT true, cluster text NOT NULL)"
        )
        for server in servers.values():
            server.namespace(self.namespace)

    def pod(self, cluster: str, name: str, *, scheduled: bool = False, active: bool = True) -> str:
        """A pod in ``cluster`` (scheduled: bound to a node without kubelet, so a DELETE leaves it
        terminating) and its host row; its UID."""
        api = core_api(self.servers[cluster].admin_kubeconfig)
        body = manifest(name, scheduled=scheduled, terminationGracePeriodSeconds=1)
        uid = str(api.create_namespaced_pod(self.namespace, body).metadata.uid)
        self.pg.execute(
            "INSERT INTO runs VALUES (%s, 1, %s, %s, %s, %s, %s)",
            (name, self.namespace, name, uuid.UUID(uid), active, cluster),
        )
        return uid

    def retire(self, *names: str) -> None:
        self.pg.execute("UPDATE runs SET active = false WHERE sandbox_id = ANY(%s)", (list(names),))

    def row(self, name: str) -> dict[str, Any]:
        row = self.pg.execute("SELECT * FROM pod_sweeper.outbox WHERE sandbox_id = %s", (name,)).fetchone()
        assert row is not None, name
        return dict(row)

    def pod_there(self, cluster: str, name: str) -> bool:
        pods = core_api(self.servers[cluster].admin_kubeconfig).list_namespaced_pod(self.namespace).items
        return name in {p.metadata.name for p in pods}


@pytest.fixture
def host(kube_apiserver: KubeApiServer, west: KubeApiServer, pg: psycopg.Connection[Any]) -> Host:
    return Host(pg, {"east": kube_apiserver, "west": west})


def replica(db_url: str, host: Host, cluster: str, **overrides: Any) -> Any:
    settings = daemon_settings(
        db_url,
        host.servers[cluster].admin_kubeconfig,
        cluster=cluster,
        replica_id=f"{cluster}-1",
        namespaces=[host.namespace],
        stuck_terminating_seconds=1.0,
        poll_interval=1.0,
        **overrides,
    )
    return DaemonThread(settings)


def test_the_confirmer_and_the_dry_run_switch_touch_only_their_own_clusters_rows(
    host: Host, pg: psycopg.Connection[Any], db_url: str
) -> None:
    run(attach_table(db_url, "public.runs", ["cluster=cluster"]))
    host.pod("west", "stuck-west", scheduled=True)
    host.pod("west", "dry-west")
    host.pod("east", "stuck-east", scheduled=True)
    # West deletes its pod, which stays terminating (no kubelet), then west's replica goes away.
    with replica(db_url, host, "west"):
        host.retire("stuck-west")
        wait_until(lambda: host.row("stuck-west")["stuck_at"] is not None, timeout=30, what="west's pod stuck")
    # West, in dry run, records what it would delete; then it goes away too.
    with replica(db_url, host, "west", dry_run=True):
        host.retire("dry-west")
        wait_until(lambda: host.row("dry-west")["outcome"] == "would_delete", timeout=30, what="west's dry run")
    west_before = host.row("stuck-west")
    # East's replica, a real run, starts (its start reopens its own dry-run rows only) and confirms its
    # own terminating pod as stuck, while west's row is left as west's replica left it.
    with replica(db_url, host, "east"):
        host.retire("stuck-east")
        wait_until(lambda: host.row("stuck-east")["stuck_at"] is not None, timeout=30, what="east's pod stuck")
        wait_until(
            lambda: host.row("stuck-east")["confirm_after"] > west_before["confirm_after"],
            timeout=30,
            what="east's confirmer passing over the rows after west's was due",
        )
        stuck_west = host.row("stuck-west")
        assert stuck_west["confirmed_at"] is None and stuck_west["confirm_after"] == west_before["confirm_after"]
        assert host.pod_there("west", "stuck-west")  # still terminating there: never "seen gone" on east
        assert (host.row("dry-west")["status"], host.row("dry-west")["outcome"]) == ("done", "would_delete")
    # West's own real run reopens its dry-run row and deletes the pod, on west.
    with replica(db_url, host, "west"):
        wait_until(lambda: host.row("dry-west")["outcome"] == "deleted", timeout=30, what="west's reopened row")
    assert not host.pod_there("west", "dry-west")


def test_backfill_retention_and_the_bulk_commands_with_one_clusters_replica_down(
    host: Host, pg: psycopg.Connection[Any], db_url: str
) -> None:
    # Retired before the attach: backfill enqueues both clusters' rows, each with its cluster.
    for cluster in ("east", "west"):
        for i in range(3):
            host.pod(cluster, f"old-{cluster}-{i}", active=False)
    run(attach_table(db_url, "public.runs", ["cluster=cluster"]))
    preview = cli("backfill", "--dry-run", url=db_url)
    assert '"public"."runs": would enqueue 6 retired row(s)' in preview.stdout
    assert cli("backfill", url=db_url).returncode == 0
    clusters = pg.execute("SELECT cluster, count(*) AS n FROM pod_sweeper.outbox GROUP BY 1 ORDER BY 1").fetchall()
    assert [(r["cluster"], r["n"]) for r in clusters] == [("east", 3), ("west", 3)]
    # An old done row of west's, and a dry run's: retention is the database's, whichever replica runs it.
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason, cluster, status, outcome, done_at) SELECT 1, 'done-west-' || o, 1, 'ns', 'p-' || o,"
        " gen_random_uuid(), 'retired', 'west', 'done', o, now() - interval '30 days'"
        " FROM unnest(ARRAY['absent', 'would_delete']) AS o"
    )
    # Only east's replica runs: east's rows are deleted on east; west's wait, untouched.
    with replica(db_url, host, "east", retention="7d"):
        wait_until(
            lambda: all(host.row(f"old-east-{i}")["outcome"] == "deleted" for i in range(3)),
            timeout=30,
            what="east's backfilled rows deleted",
        )
        wait_until(
            lambda: (
                host.pg.execute(
                    "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE sandbox_id = 'done-west-absent'"
                ).fetchone()["n"]
                == 0
            ),
            timeout=30,
            what="west's expired done row pruned by east's retention pass",
        )
    assert host.row("done-west-would_delete")["status"] == "done"  # a dry run's row is kept for west's next run
    assert all(host.row(f"old-west-{i}")["status"] == "pending" for i in range(3))
    assert all(host.pod_there("west", f"old-west-{i}") for i in range(3))
    # Bulk commands: a preview over both clusters counts each; --cluster acts on one cluster alone.
    pg.execute(
        "UPDATE pod_sweeper.outbox SET status = 'dead', outcome = NULL, done_at = NULL, last_error = 'gave up'"
        " WHERE sandbox_id LIKE 'old-%'"
    )
    preview = cli("retry", "--dead", "--dry-run", url=db_url)
    assert preview.stdout.splitlines()[0] == "would retry 6 row(s) in 2 clusters: east 3, west 3; nothing changed"
    retried = cli("retry", "--dead", "--cluster", "west", "--actor", "al", url=db_url)
    assert retried.stdout.startswith("reopened 3 row(s) in cluster west")
    statuses = {r["sandbox_id"]: r["status"] for r in pg.execute("SELECT * FROM pod_sweeper.outbox").fetchall()}
    assert {k: v for k, v in statuses.items() if k.startswith("old-")} == {
        **{f"old-east-{i}": "dead" for i in range(3)},
        **{f"old-west-{i}": "pending" for i in range(3)},
    }
    # West's replica comes back and deletes its own, on west.
    with replica(db_url, host, "west"):
        wait_until(
            lambda: all(host.row(f"old-west-{i}")["outcome"] == "deleted" for i in range(3)),
            timeout=30,
            what="west's rows deleted by west's replica",
        )
    assert not any(host.pod_there("west", f"old-west-{i}") for i in range(3))
