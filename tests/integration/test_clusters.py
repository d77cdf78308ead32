"""Many clusters, one outbox: two API servers (the fake, twice), one outbox, a replica per cluster.
Each pod is deleted in its own cluster only, the same namespace and name in both clusters is told
apart by cluster and UID, each replica is woken by its own cluster's retires only, a cluster whose
replica is down stays visible and alerting while the other goes on, and an outbox from before
clusters upgrades with nothing to change."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from harness.fakekube import InstrumentedKube
from helpers import DaemonThread, cli, daemon_settings, run, settings_for, sleeping, wait_until
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.store import db, queries
from pod_sweeper.store.schema import migrations

pytestmark = pytest.mark.versions

CLUSTERS = ("east", "west")
TABLE = (
    "CREATE TABLE runs (sandbox_id text NOT NULL, generation int NOT NULL, pod_namespace text NOT NULL,"
    " pod_name text NOT NULL, pod_uid uuid, active bool NOT NULL DEFAULT true, cluster text,"
    " PRIMARY KEY (sandbox_id, generation))"
)


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[dict[str, InstrumentedKube]]:
    with InstrumentedKube() as east, InstrumentedKube() as west:
        for name, kube in (("east", east), ("west", west)):
            kube.kubeconfig = kube.write_kubeconfig(tmp_path / f"{name}.kubeconfig")
        yield {"east": east, "west": west}


@pytest.fixture
def runs(pg: psycopg.Connection[Any], db_url: str) -> psycopg.Connection[Any]:
    from helpers import attach_table

    pg.execute(TABLE)
    run(attach_table(db_url, "public.runs", ["cluster=cluster"]))
    return pg


def record(conn: psycopg.Connection[Any], kube: InstrumentedKube, cluster: str, sid: str, name: str) -> str:
    uid = str(kube.create_pod("sandboxes", name)["metadata"]["uid"])
    conn.execute(
        "INSERT INTO runs (sandbox_id, generation, pod_namespace, pod_name, pod_uid, cluster)"
        " VALUES (%s, 1, 'sandboxes', %s, %s, %s)",
        (sid, name, uid, cluster),
    )
    return uid


def retire(conn: psycopg.Connection[Any], sid: str) -> None:
    conn.execute("UPDATE runs SET active = false WHERE sandbox_id = %s", (sid,))


def rows(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    return {r["sandbox_id"]: r for r in conn.execute("SELECT * FROM pod_sweeper.outbox").fetchall()}


def test_each_pod_is_deleted_in_its_own_cluster_and_a_twin_name_is_told_apart(
    runs: psycopg.Connection[Any], db_url: str, fakes: dict[str, InstrumentedKube]
) -> None:
    # The same namespace and pod name in both clusters, under different UIDs; only east's is retired.
    east_uid = record(runs, fakes["east"], "east", "twin-east", "twin")
    west_uid = record(runs, fakes["west"], "west", "twin-west", "twin")
    for i in range(3):
        record(runs, fakes["west"], "west", f"w{i}", f"w{i}")
    with (
        DaemonThread(daemon_settings(db_url, fakes["east"], cluster="east", replica_id="east-1")),
        DaemonThread(daemon_settings(db_url, fakes["west"], cluster="west", replica_id="west-1")),
    ):
        for sid in ("twin-east", "w0", "w1", "w2"):
            retire(runs, sid)
        done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done'"
        wait_until(lambda: runs.execute(done).fetchone()["n"] == 4, timeout=15, what="four rows done")
    by_sid = rows(runs)
    assert by_sid["twin-east"]["cluster"] == "east" and by_sid["twin-east"]["claimed_by"] == "east-1"
    assert {by_sid[f"w{i}"]["claimed_by"] for i in range(3)} == {"west-1"}
    assert fakes["east"].get_pod("sandboxes", "twin") is None
    kept = fakes["west"].get_pod("sandboxes", "twin")
    assert kept is not None and kept["metadata"]["uid"] == west_uid != east_uid
    # No request crossed over: each server saw its own cluster's DELETEs and nothing else.
    assert [r.path.rsplit("/", 1)[1] for r in fakes["east"].deletes()] == ["twin"]
    assert sorted(r.path.rsplit("/", 1)[1] for r in fakes["west"].deletes()) == ["w0", "w1", "w2"]


def test_a_replica_is_woken_by_its_own_clusters_retires_only(
    runs: psycopg.Connection[Any], db_url: str, fakes: dict[str, InstrumentedKube]
) -> None:
    for i in range(3):
        record(runs, fakes["west"], "west", f"w{i}", f"w{i}")
    record(runs, fakes["east"], "east", "e0", "e0")
    with DaemonThread(daemon_settings(db_url, fakes["east"], cluster="east", replica_id="east-1")) as east:
        wait_until(lambda: sleeping(east), what="east asleep")
        for i in range(3):
            retire(runs, f"w{i}")  # no west replica runs: these wait, and must not wake east
        metrics = east.daemon.metrics
        retire(runs, "e0")
        wait_until(lambda: rows(runs)["e0"]["status"] == "done", timeout=5, what="east's row, by its NOTIFY")
        assert metrics.value("pod_sweeper_wakeups_total", source="notify") == 1
        assert all(rows(runs)[f"w{i}"]["status"] == "pending" for i in range(3))


def test_a_cluster_whose_replica_is_down_is_visible_and_alerting_and_the_other_goes_on(
    runs: psycopg.Connection[Any], db_url: str, fakes: dict[str, InstrumentedKube]
) -> None:
    record(runs, fakes["west"], "west", "w0", "w0")
    retire(runs, "w0")  # west's sweepers are all down
    runs.execute("UPDATE pod_sweeper.outbox SET enqueued_at = now() - interval '20 minutes'")
    with DaemonThread(daemon_settings(db_url, fakes["east"], cluster="east", replica_id="east-1")) as east:
        record(runs, fakes["east"], "east", "e0", "e0")
        retire(runs, "e0")
        wait_until(lambda: rows(runs)["e0"]["status"] == "done", timeout=5, what="east unaffected")
        metrics: Metrics = east.daemon.metrics
        # Every replica exports every cluster's lag: west's shows from east's replica.
        wait_until(
            lambda: metrics.value("pod_sweeper_cluster_lag_seconds", pod_cluster="west") > 1000,
            timeout=10,
            what="west's lag in east's metrics",
        )
        assert metrics.value("pod_sweeper_cluster_pending_rows", pod_cluster="west") == 1
    assert rows(runs)["w0"]["status"] == "pending" and fakes["west"].get_pod("sandboxes", "w0") is not None
    fired = runs.execute(queries.load("dba/alerts")).fetchall()
    assert any(r["alert"] == "PodSweeperClusterUnswept" and r["detail"].startswith("cluster west:") for r in fired)
    lag = {r["cluster"]: r for r in runs.execute("SELECT * FROM pod_sweeper.lag_by_cluster").fetchall()}
    assert set(lag) == {"west"} and lag["west"]["oldest_claimable_seconds"] > 1000


def test_one_clusters_burst_trips_its_own_breaker_and_never_stops_another(
    runs: psycopg.Connection[Any], db_url: str, fakes: dict[str, InstrumentedKube]
) -> None:
    """Each cluster has its own breaker, budget and readiness: east's burst trips east's alone, while
    west deletes all of its rows and stays ready; `resume --cluster east` lets east go on."""
    limit = 20
    for i in range(60):
        record(runs, fakes["east"], "east", f"e{i}", f"e{i}")
    for i in range(10):
        record(runs, fakes["west"], "west", f"w{i}", f"w{i}")
    replicas = {
        cluster: daemon_settings(
            db_url, fakes[cluster], cluster=cluster, replica_id=f"{cluster}-1", max_deletes_per_minute=limit
        )
        for cluster in CLUSTERS
    }
    deleted = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE cluster = %s AND outcome = 'deleted'"
    with DaemonThread(replicas["east"]) as east, DaemonThread(replicas["west"]) as west:
        runs.execute("UPDATE runs SET active = false WHERE cluster = 'east'")  # a bad migration, east only
        wait_until(lambda: east.daemon.sweeper.status.breaker, timeout=15, what="east's breaker to trip")
        runs.execute("UPDATE runs SET active = false WHERE cluster = 'west'")
        wait_until(lambda: runs.execute(deleted, ("west",)).fetchone()["n"] == 10, timeout=15, what="west swept")
        assert west.daemon.ready and west.daemon.sweeper.status.breaker is None
        assert not east.daemon.ready and "cluster east" in east.daemon.health.readiness()[1]
        tripped = {
            cluster: replica.daemon.metrics.value("pod_sweeper_breaker_tripped", pod_cluster=cluster)
            for cluster, replica in (("east", east), ("west", west))
        }
        assert tripped == {"east": 1, "west": 0}
        held = runs.execute(deleted, ("east",)).fetchone()["n"]
        assert limit // 2 <= held <= limit
        breakers = {r["cluster"]: r for r in runs.execute("SELECT * FROM pod_sweeper.breaker").fetchall()}
        assert breakers["east"]["tripped_at"] is not None and breakers["west"]["tripped_at"] is None
        assert "cluster east: " in breakers["east"]["reason"]
        fired = runs.execute(queries.load("dba/alerts")).fetchall()
        assert [r["detail"].split(":")[0] for r in fired if r["alert"] == "PodSweeperBreakerTripped"] == [
            "cluster east"
        ]
        resumed = cli("resume", "--cluster", "east", url=db_url)  # the old name of reset-breaker still works
        assert resumed.returncode == 0 and "deletes resume in cluster east" in resumed.stdout, resumed.stderr
        wait_until(lambda: runs.execute(deleted, ("east",)).fetchone()["n"] > held, timeout=15, what="east resumes")


def test_a_table_of_one_cluster_and_a_missing_cluster_value(
    pg: psycopg.Connection[Any], db_url: str, fakes: dict[str, InstrumentedKube]
) -> None:
    from helpers import attach_table, create_executions

    create_executions(pg, "public.east_runs")
    assert run(attach_table(db_url, "public.east_runs", cluster="east")) > 0
    uid = fakes["east"].create_pod("sandboxes", "p")["metadata"]["uid"]
    pg.execute(
        "INSERT INTO east_runs (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " VALUES ('s', 1, 'sandboxes', 'p', %s, false)",
        (uid,),
    )
    assert [r["cluster"] for r in pg.execute("SELECT cluster FROM pod_sweeper.outbox").fetchall()] == ["east"]
    pg.execute(TABLE)
    run(attach_table(db_url, "public.runs", ["cluster=cluster"]))
    pg.execute(
        "INSERT INTO runs (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " VALUES ('nowhere', 1, 'sandboxes', 'q', %s, false)",
        (uuid.uuid4(),),
    )  # no cluster on the row: a reject, never a guess (and never a failed write)
    [reject] = pg.execute("SELECT * FROM pod_sweeper.rejects").fetchall()
    assert reject["problem"] == "cluster is NULL" and reject["sandbox_id"] == "nowhere"


def test_an_outbox_from_before_clusters_upgrades_with_nothing_to_change(
    empty_db_url: str, fakes: dict[str, InstrumentedKube], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migrated to 0008 and populated through the trigger attach generated then; migrated on: the rows
    and the old trigger's retires belong to the default cluster, which a replica with no setting sweeps."""
    kube = fakes["east"]
    before = tuple(m for m in migrations.shipped() if m.version <= 8)

    async def migrate() -> None:
        async with db.connection(settings_for(empty_db_url)) as conn:
            await migrations.migrate(conn)

    monkeypatch.setattr(migrations, "shipped", lambda: before)
    run(migrate())
    with psycopg.connect(empty_db_url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        conn.execute(TABLE)
        conn.execute(
            "INSERT INTO pod_sweeper.attachments (table_schema, table_name, column_map) VALUES ('public', 'runs',"
            ' \'{"sandbox_id": "sandbox_id", "generation": "generation", "pod_namespace": "pod_namespace",'
            ' "pod_name": "pod_name", "pod_uid": "pod_uid", "active": "active"}\')'
        )
        # What attach generated before clusters (the seven-argument enqueue), and its trigger.
        conn.execute(
            "CREATE FUNCTION pod_sweeper.enqueue_1() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$"
            " BEGIN PERFORM pod_sweeper.enqueue(1, NEW.sandbox_id::text, NEW.generation::bigint,"
            " NEW.pod_namespace::text, NEW.pod_name::text, NEW.pod_uid, 'retired'); RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER t AFTER UPDATE ON runs FOR EACH ROW WHEN (NEW.pod_uid IS NOT NULL AND NOT NEW.active)"
            " EXECUTE FUNCTION pod_sweeper.enqueue_1()"
        )
        for i in range(3):
            record(conn, kube, "", f"s{i}", f"p{i}")
        retire(conn, "s0")
        retire(conn, "s1")
        monkeypatch.undo()
        run(migrate())  # 0009 on a populated outbox
        assert [r["cluster"] for r in conn.execute("SELECT cluster FROM pod_sweeper.outbox").fetchall()] == [
            "default",
            "default",
        ]
        retire(conn, "s2")  # the old trigger, after the upgrade: the default cluster
        settings = daemon_settings(empty_db_url, kube)  # no cluster setting
        with DaemonThread(settings):
            done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done' AND outcome = 'deleted'"
            wait_until(lambda: conn.execute(done).fetchone()["n"] == 3, timeout=15, what="all three deleted")
        assert [kube.get_pod("sandboxes", f"p{i}") for i in range(3)] == [None, None, None]


def test_each_cluster_has_its_own_reconciliation_lease_and_quarantine(
    runs: psycopg.Connection[Any], db_url: str
) -> None:
    pg = runs  # an attached table: suspects refer to their attachment
    from pod_sweeper.store.sweep import outbox, quarantine

    async def scenario() -> list[Any]:
        async with db.connection(settings_for(db_url)) as conn:
            for cluster in CLUSTERS:
                await outbox.cluster_rows(conn, cluster=cluster)
            east = await quarantine.begin(conn, replica="east-1", gap=60, lease=60, cluster="east")
            west = await quarantine.begin(conn, replica="west-1", gap=60, lease=60, cluster="west")
            again = await quarantine.begin(conn, replica="east-2", gap=60, lease=60, cluster="east")
            assert east is not None
            sighting = quarantine.Sighting(str(uuid.uuid4()), "sandboxes", "p", "s", 1, 1, "retired")
            await quarantine.sight(conn, [sighting], started_at=east, quarantine=600, cluster="east")
            left = await quarantine.finish(
                conn, replica="east-1", started_at=east, seen=1, enqueued=0, error=None, cluster="east"
            )
            return [east, west, again, left]

    east, west, again, left = run(scenario())
    assert east is not None and west is not None  # one pass per cluster at once
    assert again is None  # but one replica at a time within a cluster
    assert left == 1
    suspects = pg.execute("SELECT cluster FROM pod_sweeper.suspects").fetchall()
    assert [s["cluster"] for s in suspects] == ["east"]
    state = {r["cluster"]: r for r in pg.execute("SELECT * FROM pod_sweeper.reconcile_state").fetchall()}
    assert set(state) == {"default", "east", "west"} and state["east"]["last_suspects"] == 1
    assert state["west"]["last_finished_at"] is None  # west's pass still holds its own lease
