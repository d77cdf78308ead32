"""The reconciliation backstop against real Postgres and the fake API server: who becomes a suspect,
the quarantine, confirmation by a fresh GET and a fresh database read, one replica at a time,
pagination, and the daemon reaping what the outbox never heard of."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import psycopg
import pytest

from helpers import DaemonThread, outbox, run, settings_for, wait_until
from pod_sweeper.cli import status_text
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import DEFAULT_CLUSTER, Settings
from pod_sweeper.kube.answer import Answer
from pod_sweeper.kube.api import KubeClient
from pod_sweeper.kube.config import load_configuration
from pod_sweeper.kube.interface import PodKube, PodPage, PodState
from pod_sweeper.store import db
from pod_sweeper.store.reads import status
from pod_sweeper.store.sweep import quarantine
from pod_sweeper.tasks.loops import reconciler as reconciler_module
from pod_sweeper.tasks.loops.outage import OutageWatch
from pod_sweeper.tasks.loops.reconciler import Reconciler

pytestmark = pytest.mark.versions

NS = "sandboxes"
SANDBOX, GENERATION = "example.com/sandbox", "example.com/generation"
OLD = datetime.now(UTC) - timedelta(hours=1)


def reconcile_settings(db_url: str, kube: Any, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "kubeconfig": kube.kubeconfig,
        "rate_limit_qps": 0,
        "reconcile_sandbox_label": SANDBOX,
        "reconcile_generation_label": GENERATION,
        "reconcile_namespace": NS,
        "reconcile_interval": 0.01,
        "reconcile_quarantine": 3600,
        "reconcile_min_age": 60,
    }
    return settings_for(db_url, **{**values, **overrides})


def labelled(kube: Any, name: str, sandbox: str, generation: str, *, created: datetime = OLD, ns: str = NS) -> str:
    pod = kube.create_pod(ns, name, labels={SANDBOX: sandbox, GENERATION: generation}, created=created)
    return str(pod["metadata"]["uid"])


def execution(conn: psycopg.Connection[Any], sandbox: str, *, uid: str | None, active: bool) -> None:
    conn.execute(
        "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " VALUES (%s, 1, %s, %s, %s, %s)",
        (sandbox, NS, sandbox, uid, active),
    )


def suspects(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    rows = conn.execute("SELECT * FROM pod_sweeper.suspects ORDER BY pod_name").fetchall()
    return {r["pod_name"]: r for r in rows}


class RacingKube:
    """The real client (a ``PodKube``), with a hook that runs around each GET of a pod: a race staged
    between the list and the GET, or between the GET and the database read."""

    def __init__(self, real: KubeClient, around_get: Callable[[str, Callable[[], PodState | None]], PodState | None]):
        self.real, self.around_get = real, around_get

    def pod_state(self, namespace: str, name: str, *, timeout: float) -> PodState | None:
        return self.around_get(name, lambda: self.real.pod_state(namespace, name, timeout=timeout))

    def list_pods(
        self, namespace: str, label_selector: str, *, limit: int, continue_token: str | None, timeout: float
    ) -> PodPage:
        return self.real.list_pods(
            namespace, label_selector, limit=limit, continue_token=continue_token, timeout=timeout
        )

    def node_exists(self, name: str, *, timeout: float) -> bool:
        return self.real.node_exists(name, timeout=timeout)

    def force_delete(self, namespace: str, name: str, uid: str, *, timeout: float) -> Answer:
        return self.real.force_delete(namespace, name, uid, timeout=timeout)


@contextlib.asynccontextmanager
async def reconciler(
    settings: Settings, around_get: Callable[[str, Callable[[], PodState | None]], PodState | None] | None = None
) -> AsyncIterator[Reconciler]:
    kube_client = KubeClient(load_configuration(settings.kubeconfig, None, pool_size=2))
    kube: PodKube = RacingKube(kube_client, around_get) if around_get else kube_client
    pool = db.make_pool(settings, max_size=2)
    await pool.open(wait=True, timeout=10)
    try:
        metrics = Metrics()
        yield Reconciler(settings, pool, kube, metrics, OutageWatch(settings, pool, kube_client, metrics))
    finally:
        await pool.close()
        kube_client.close()


def test_suspects_wait_out_their_quarantine_then_are_confirmed_and_enqueued(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    uids = {
        "a": labelled(kube, "a", "a", "1"),  # its create never recorded the UID; then retired
        "b": labelled(kube, "b", "b", "1"),  # no execution row names it at all
        "c": labelled(kube, "c", "c", "1"),  # active, UID recorded
        "d": labelled(kube, "d", "d", "1"),  # active, UID not recorded yet
        "young": labelled(kube, "young", "young", "1", created=datetime.now(UTC)),
        "odd": labelled(kube, "odd", "odd", "not-a-number"),
        "elsewhere": labelled(kube, "elsewhere", "elsewhere", "1", ns="other"),
    }
    kube.create_pod(NS, "unlabelled", created=OLD)
    kube.create_pod(NS, "half", labels={SANDBOX: "half"}, created=OLD)
    execution(execs, "a", uid=None, active=False)
    execution(execs, "c", uid=uids["c"], active=True)
    execution(execs, "d", uid=None, active=True)

    async def scenario() -> list[Any]:
        async with reconciler(reconcile_settings(db_url, kube)) as r:
            first, second = await r.pass_once(), await r.pass_once()
        async with reconciler(reconcile_settings(db_url, kube, reconcile_quarantine=0.001)) as r:
            third = await r.pass_once()
        return [first, second, third]

    first, second, third = run(scenario())
    # Labelled with both keys in the namespace: a, b, c, d, young, odd. Suspects: only a and b.
    assert first.seen == 6 and first.complete and first.enqueued == 0 and first.suspects == 2
    assert second.enqueued == 0 and second.suspects == 2  # seen again, but not yet quarantined long enough
    assert third.enqueued == 2 and third.suspects == 0
    rows = {r["pod_name"]: r for r in outbox(execs)}
    assert set(rows) == {"a", "b"}
    assert all(r["reason"] == "reconciled" and r["status"] == "pending" for r in rows.values())
    assert {n: str(r["pod_uid"]) for n, r in rows.items()} == {"a": uids["a"], "b": uids["b"]}
    # Confirmed by a fresh GET of each, after the lists.
    gets = [r.path.rsplit("/", 1)[1] for r in kube.requests if r.method == "GET" and "/pods/" in r.path]
    assert sorted(gets) == ["a", "b"]
    assert not kube.deletes()  # the pass never deletes by itself


class _DayAhead(datetime):
    """``datetime`` on a host whose wall clock runs a day ahead of everyone's."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> datetime:
        return datetime.now(tz) + timedelta(days=1)


def test_a_young_pod_is_young_whatever_the_replicas_wall_clock_says(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's age (``POD_SWEEPER_RECONCILE_MIN_AGE``) is its creation time against the database's clock at
    the pass's start, not the replica's wall clock: a replica a day ahead would see every pod a day old,
    and a create whose execution row is not written yet would be a suspect."""
    labelled(kube, "young", "young", "1", created=datetime.now(UTC))
    monkeypatch.setattr(reconciler_module, "datetime", _DayAhead, raising=False)

    async def scenario() -> Any:
        async with reconciler(reconcile_settings(db_url, kube)) as r:
            return await r.pass_once()

    result = run(scenario())
    assert result.seen == 1 and result.complete and result.suspects == 0
    assert suspects(execs) == {}


def test_a_suspect_replaced_or_reactivated_before_confirmation_is_not_enqueued(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    labelled(kube, "swapped", "swapped", "1")
    labelled(kube, "revived", "revived", "1")
    execution(execs, "revived", uid=None, active=False)

    racing = False  # the first pass only makes the suspects

    def around_get(name: str, get: Callable[[], PodState | None]) -> PodState | None:
        if racing and name == "swapped":  # between the list and the GET, a new pod takes the name
            kube.remove_pod(NS, "swapped")
            labelled(kube, "swapped", "swapped", "1")
        state = get()
        if racing and name == "revived":  # between the GET and the database read, the generation comes back
            with psycopg.connect(db_url, autocommit=True) as conn:
                conn.execute("UPDATE executions SET active = true WHERE sandbox_id = 'revived'")
        return state

    async def scenario() -> Any:
        nonlocal racing
        async with reconciler(reconcile_settings(db_url, kube, reconcile_quarantine=0.001), around_get) as r:
            await r.pass_once()
            racing = True
            return await r.pass_once()

    result = run(scenario())
    assert result.enqueued == 0 and outbox(execs) == []
    assert suspects(execs) == {}  # both forgotten; the new 'swapped' pod starts its own quarantine next pass


def test_one_replica_at_a_time_and_one_pass_per_interval(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    def other_replica_started(ago: str) -> None:
        execs.execute(
            "UPDATE pod_sweeper.reconcile_state SET last_started_at = now() - %s::interval,"
            " last_finished_at = NULL, last_replica = 'other'",
            (ago,),
        )

    async def scenario() -> list[Any]:
        async with reconciler(reconcile_settings(db_url, kube, reconcile_interval=3600)) as r:
            other_replica_started("40 minutes")  # past the gap, inside its lease: still in its pass
            held = await r.pass_once()
            other_replica_started("61 minutes")  # past its lease: that replica died mid-pass
            taken_over = await r.pass_once()
            return [held, taken_over, await r.pass_once()]

    held, ran, too_soon = run(scenario())
    assert held is None and ran is not None and ran.complete and too_soon is None
    state = execs.execute("SELECT * FROM pod_sweeper.reconcile_state").fetchone()
    assert state is not None and state["last_finished_at"] is not None and state["last_error"] is None
    assert state["last_replica"] != "other" and state["last_finished_at"] >= state["last_started_at"]
    locks = execs.execute("SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory'").fetchone()
    assert locks is not None and locks["n"] == 0


def test_a_pass_that_outlived_its_lease_records_nothing_over_the_one_that_took_it_over(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """The lease row, not a session lock, decides who runs a pass: a replica that held it too long (a
    frozen process, a slow listing) finds another's start when it finishes, and leaves it alone."""
    settings = reconcile_settings(db_url, kube)

    async def scenario() -> None:
        async with db.connection(settings) as conn:
            slow = await quarantine.begin(conn, replica="slow", gap=0, lease=60, cluster=DEFAULT_CLUSTER)
            assert slow is not None
            # Its lease runs out (it started two minutes ago, as far as the row says) ...
            await conn.execute(
                "UPDATE pod_sweeper.reconcile_state SET last_started_at = last_started_at - interval '2 minutes'"
            )
            slow_started = await (
                await conn.execute("SELECT last_started_at FROM pod_sweeper.reconcile_state")
            ).fetchone()
            assert slow_started is not None
            # ... and another replica takes the pass over.
            assert await quarantine.begin(conn, replica="fresh", gap=0, lease=60, cluster=DEFAULT_CLUSTER) is not None
            await quarantine.finish(
                conn,
                replica="slow",
                started_at=slow_started["last_started_at"],
                seen=7,
                enqueued=7,
                error=None,
                cluster=DEFAULT_CLUSTER,
            )
            row = await (await conn.execute("SELECT * FROM pod_sweeper.reconcile_state")).fetchone()
            assert row is not None and row["last_replica"] == "fresh" and row["last_finished_at"] is None
            assert row["last_pods_seen"] != 7
            fresh_started = row["last_started_at"]
            await quarantine.finish(
                conn, replica="fresh", started_at=fresh_started, seen=1, enqueued=0, error=None, cluster=DEFAULT_CLUSTER
            )

    run(scenario())
    state = execs.execute("SELECT * FROM pod_sweeper.reconcile_state").fetchone()
    assert state is not None and state["last_replica"] == "fresh" and state["last_pods_seen"] == 1
    assert state["last_finished_at"] >= state["last_started_at"]


def test_pages_through_the_list_and_keeps_quarantine_when_a_listing_breaks(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    for i in range(5):
        labelled(kube, f"p{i}", f"p{i}", "1")

    async def scenario() -> list[Any]:
        settings = reconcile_settings(db_url, kube, reconcile_page_size=2)
        async with reconciler(settings) as r:
            whole = await r.pass_once()
            real = r.kube.list_pods

            def expiring(*args: Any, **kwargs: Any) -> Any:
                page = real(*args, **kwargs)
                # The continue token this page carries will have expired by the next request.
                kube.inject("status", method="GET", path=r"/pods$", code=410, reason="Expired")
                return page

            r.kube.list_pods = expiring  # type: ignore[method-assign]
            broken = await r.pass_once()
            return [whole, broken]

    whole, broken = run(scenario())
    lists = [r for r in kube.requests if r.method == "GET" and r.path.endswith("/pods")]
    assert whole.seen == 5 and whole.complete and whole.suspects == 5
    assert [("continue" in r.query) for r in lists[:3]] == [False, True, True]
    assert all(r.query["limit"] == ["2"] and r.query["labelSelector"] == [f"{SANDBOX},{GENERATION}"] for r in lists)
    assert broken.seen == 2 and not broken.complete and broken.error and "410" in broken.error
    assert len(suspects(execs)) == 5  # the pods it could not list keep their quarantine
    state = execs.execute("SELECT last_error FROM pod_sweeper.reconcile_state").fetchone()
    assert state is not None and "410" in state["last_error"]

    async def show() -> str:
        async with db.connection(settings_for(db_url)) as conn:
            return status_text.render_text(await status.read_status(conn))

    text = run(show())
    assert "2 labelled pod(s) seen, 0 enqueued; 5 suspect(s) in quarantine" in text and "stopped early" in text


def test_the_daemon_reaps_an_orphan_only_after_quarantine(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    orphan = labelled(kube, "orphan", "orphan", "1")  # its create died before it recorded the UID
    labelled(kube, "live", "live", "1")
    execution(execs, "orphan", uid=None, active=False)
    execution(execs, "live", uid=None, active=True)
    quarantine = 1.0
    settings = reconcile_settings(db_url, kube, reconcile_interval=0.2, reconcile_quarantine=quarantine)
    with DaemonThread(settings) as daemon:
        first_seen = wait_until(lambda: (s := suspects(execs).get("orphan")) and s["first_seen_at"], what="a suspect")
        wait_until(lambda: kube.get_pod(NS, "orphan") is None, timeout=20, what="the orphan reaped")
        assert daemon.daemon.metrics.value("pod_sweeper_reconcile_enqueued_total") == 1
    (row,) = outbox(execs)
    assert row["reason"] == "reconciled" and str(row["pod_uid"]) == orphan
    assert row["status"] == "done" and row["outcome"] == "deleted"
    assert (row["enqueued_at"] - first_seen).total_seconds() >= quarantine
    assert kube.get_pod(NS, "live") is not None
    assert [r.path.rsplit("/", 1)[1] for r in kube.deletes()] == ["orphan"]


def test_a_held_pod_stays_quarantined_and_is_enqueued_once_released(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """`pod-sweeper hold` (migration 0011): the pass confirms a held orphan but never enqueues it; its
    suspect waits, and the first pass after the release enqueues it."""
    from helpers import cli

    uid = labelled(kube, "kept", "kept", "1")
    held = cli("hold", f"{NS}/kept", "--reason", "forensics", url=db_url)
    assert held.returncode == 0, held.stderr

    async def passes() -> list[Any]:
        async with reconciler(reconcile_settings(db_url, kube)) as r:
            first = await r.pass_once()
        async with reconciler(reconcile_settings(db_url, kube, reconcile_quarantine=0.001)) as r:
            second = await r.pass_once()
        return [first, second]

    first, second = run(passes())
    assert (first.suspects, second.enqueued, second.suspects) == (1, 0, 1)
    assert outbox(execs) == [] and set(suspects(execs)) == {"kept"}
    released = cli("release", f"{NS}/kept", url=db_url)
    assert released.returncode == 0, released.stderr

    async def after() -> Any:
        async with reconciler(reconcile_settings(db_url, kube, reconcile_quarantine=0.001)) as r:
            return await r.pass_once()

    assert run(after()).enqueued == 1
    assert [str(r["pod_uid"]) for r in outbox(execs)] == [uid]
