"""The in-memory store (``harness.memstore``) held to the real one: the same scenario of claims, records,
fences, re-checks and an expired lease, run on ``store.sweep.pgstore.OutboxStore`` over real PostgreSQL (rows
enqueued by the real trigger) and on ``MemoryStore``, every row compared after each step. The unit tests
of the tasks (tests/unit/test_sweep_tasks.py) run on the memory store because of this test."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row

from harness import memlarge, memstore
from harness.clock import FakeClock
from harness.memreconcile import MemoryReconcile
from harness.memstore import MemoryStore
from harness.postgres import ThrowawayCluster
from helpers import attach_table, create_executions, settings_for, wait_until
from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.settings import Settings
from pod_sweeper.core.states import Result
from pod_sweeper.store import db, queries
from pod_sweeper.store.admin import bulk, controls
from pod_sweeper.store.interface import SweepStore
from pod_sweeper.store.reads import waits
from pod_sweeper.store.rows import Arming, Claim, ClaimedBatch, LargeTransaction, Verdict
from pod_sweeper.store.schema import migrations
from pod_sweeper.store.sweep import breaker, outages, outbox, presence, quarantine, rates, recheck, terminating
from pod_sweeper.store.sweep.pgstore import OutboxStore
from pod_sweeper.store.sweep.recheck import load_attachments
from pod_sweeper.tasks.rules import verdicts

POLICY = verdicts.Policy(10, Backoff(1.0, 1.0))
SANDBOXES = [f"s{i}" for i in range(5)]
# The columns the pipeline reads and writes, per sandbox.
COLUMNS = ("status", "outcome", "attempts", "claim_epoch", "claimed_by", "last_error", "last_http_status")


class World(Protocol):
    store: SweepStore

    def retire(self, sandbox: str) -> None: ...
    def activate(self, sandbox: str) -> None: ...
    async def until_due(self) -> None: ...
    def rows(self) -> dict[str, tuple[Any, ...]]: ...


class Postgres:
    """The real outbox: executions attached, retired one statement at a time (the trigger enqueues)."""

    def __init__(self, conn: psycopg.Connection[Any], store: OutboxStore) -> None:
        self.conn, self.store = conn, store
        for sandbox in SANDBOXES:
            conn.execute(
                "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
                " VALUES (%s, 1, 'sandboxes', %s, %s, true)",
                (sandbox, f"pod-{sandbox}", uuid.uuid4()),
            )

    def retire(self, sandbox: str) -> None:
        self.conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (sandbox,))

    def activate(self, sandbox: str) -> None:
        self.conn.execute("UPDATE executions SET active = true WHERE sandbox_id = %s", (sandbox,))

    async def until_due(self) -> None:
        """Until the database's own clock makes the next open row due (it moves by itself)."""
        deadline = time.monotonic() + 10
        while (due := await next_due(self)) is not None and due > 0:
            assert time.monotonic() < deadline, "nothing fell due"
            await asyncio.sleep(min(due, 0.05))

    def rows(self) -> dict[str, tuple[Any, ...]]:
        found = self.conn.execute("SELECT * FROM pod_sweeper.outbox").fetchall()
        return {r["sandbox_id"]: tuple(r[c] for c in COLUMNS) for r in found}


class Memory:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.store = self.memory = MemoryStore(self.clock, replica="contract")

    def retire(self, sandbox: str) -> None:
        # Each sandbox's one pod, as its execution row names it on PostgreSQL.
        self.memory.retire(sandbox, uid=uuid.uuid5(uuid.NAMESPACE_OID, sandbox))
        self.clock.advance(0.001)  # each retire its own transaction, so each its own enqueue time

    def activate(self, sandbox: str) -> None:
        self.memory.activate(sandbox)

    async def until_due(self) -> None:
        due = await next_due(self)
        assert due is not None
        self.clock.advance(max(due, 0.0))

    def rows(self) -> dict[str, tuple[Any, ...]]:
        out = {}
        for r in self.memory.rows.values():
            status = r.status.value
            outcome = r.outcome.value if r.outcome is not None else None
            out[r.sandbox_id] = (
                status,
                outcome,
                r.attempts,
                r.claim_epoch,
                r.claimed_by,
                r.last_error,
                r.last_http_status,
            )
        return out


async def claim(world: World, batch: int, lease: float = 30, *, gathering: bool = False) -> ClaimedBatch:
    async with world.store.session() as session:
        return await session.claim(
            batch=batch,
            lease_seconds=lease,
            disarm=True,
            at_claim=lambda c, checked: verdicts.at_claim(c, checked, POLICY),
            guard=None,
            gathering=gathering,
        )


async def record(world: World, verdicts: list[Verdict]) -> set[str]:
    """Write the verdicts; the sandboxes of the rows the store said were still ours."""
    async with world.store.session() as session, session.transaction():
        owned = await session.record_results(verdicts)
    return {sandbox for sandbox, row_id in ids(world).items() if row_id in owned}


async def next_due(world: World) -> float | None:
    async with world.store.session() as session:
        return await session.next_due()


def ids(world: World) -> dict[str, int]:
    if isinstance(world, Memory):
        return {r.sandbox_id: r.id for r in world.memory.rows.values()}
    assert isinstance(world, Postgres)
    return {r["sandbox_id"]: r["id"] for r in world.conn.execute("SELECT sandbox_id, id FROM pod_sweeper.outbox")}


def by_sandbox(claims: list[Claim]) -> dict[str, Claim]:
    return {c.sandbox_id: c for c in claims}


async def scenario(world: World) -> list[Any]:
    """Every step's observations: what a claim took, what a record owned, the rows after."""
    seen: list[Any] = []
    for sandbox in SANDBOXES:
        world.retire(sandbox)
    seen.append(("enqueued", world.rows()))

    first = await claim(world, 3)
    taken = by_sandbox(first.to_send)
    seen.append(("first claim", sorted(taken), [c.attempts for c in first.to_send], world.rows()))

    a, b, c = taken["s0"], taken["s1"], taken["s2"]
    owned = await record(
        world,
        [
            Verdict(a.id, a.epoch, Result.DELETED, http_status=200),
            Verdict(b.id, b.epoch, Result.RETRY, delay=600, error="503 ServiceUnavailable", http_status=503),
            verdicts.handed_back(c, error="the stop"),
        ],
    )
    seen.append(("recorded", sorted(owned), world.rows()))

    stale = await record(world, [Verdict(a.id, a.epoch - 1, Result.DEAD, error="a replica that lost its lease")])
    seen.append(("a stale epoch is fenced", sorted(stale), world.rows()))

    due = await next_due(world)
    seen.append(("something is due now", due is not None and due <= 0))

    world.activate("s3")
    second = await claim(world, 10, lease=0.5)
    decided = {claim.sandbox_id: verdict.result for claim, verdict in second.decided}
    seen.append(("second claim", sorted(by_sandbox(second.to_send)), decided, world.rows()))

    await world.until_due()  # the second claim's leases expire (the retry of s1 is ten minutes away)
    third = await claim(world, 10)
    expired = {c.sandbox_id: c.lease_expired_from for c in third.to_send}
    seen.append(("leases taken over", expired, world.rows()))

    late = by_sandbox(second.to_send)["s4"]
    fenced = await record(world, [Verdict(late.id, late.epoch, Result.DELETED, http_status=200)])
    seen.append(("the old lease's record is fenced", sorted(fenced), world.rows()))
    return seen


@contextlib.asynccontextmanager
async def outbox_stores(
    settings: Settings, *replicas: str, guard: list[str] | None = None
) -> AsyncIterator[list[OutboxStore]]:
    """One ``OutboxStore`` per replica named, on one pool of the database ``settings`` name, reading the
    attachments as a replica does at start; the pool closed after."""
    pool = db.make_pool(settings, max_size=len(replicas) + 1)
    await pool.open(wait=True, timeout=10)
    try:
        async with pool.connection() as conn:
            attachments = await load_attachments(conn)
        yield [
            OutboxStore(pool, cluster=settings.cluster, replica=replica, attachments=attachments, guard=guard)
            for replica in replicas
        ]
    finally:
        await pool.close()


def held_to(real: list[Any], memory: list[Any]) -> None:
    """Every step of the memory store's run answered as PostgreSQL's did (named by the step's first item)."""
    for step_real, step_memory in zip(real, memory, strict=True):
        assert step_memory == step_real, step_real[0]


def test_the_memory_store_answers_as_the_real_one(execs: psycopg.Connection[Any], db_url: str) -> None:
    settings = settings_for(db_url, replica_id="contract")

    async def on_postgres() -> list[Any]:
        async with outbox_stores(settings, "contract") as (store,):
            return await scenario(Postgres(execs, store))

    real = asyncio.run(on_postgres())
    held_to(real, asyncio.run(scenario(Memory())))
    # The scenario reached what it meant to: each kind of end, a fence, a re-check and a takeover.
    rows = real[-1][-1]
    assert rows["s0"][:2] == ("done", "deleted") and rows["s3"][:2] == ("done", "skipped_active")
    assert real[-2][1] == {"s2": "contract", "s4": "contract"} and real[-1][1] == []


async def flag_scenario(world: World, armed: Any) -> list[Any]:
    """The wakeup flag through claims that take fewer rows than asked: ``armed()`` reads it. A claim of
    a partial batch leaves an armed flag armed (its replica arms it again before it sleeps anyway); a
    gathering claim (the claimer paused awake after taking rows) clears it when it takes a row, however
    recently it was armed, and leaves it when it takes none."""

    async def gathered(batch: int, *, gathering: bool) -> list[str]:
        return sorted(c.sandbox_id for c in (await claim(world, batch, gathering=gathering)).to_send)

    async def arm() -> Arming:
        async with world.store.session() as session:
            return await session.arm()

    seen: list[Any] = [("armed", await arm(), armed())]
    world.retire("s0")
    world.retire("s1")
    seen.append(("a partial batch", await gathered(10, gathering=False), armed()))
    world.retire("s2")
    seen.append(("a gathering claim with a row", await gathered(10, gathering=True), armed()))
    seen.append(("armed again", await arm(), armed()))
    seen.append(("a gathering claim with none", await gathered(10, gathering=True), armed()))
    return seen


def test_a_gathering_claim_clears_the_wakeup_flag_as_the_real_one(execs: psycopg.Connection[Any], db_url: str) -> None:
    settings = settings_for(db_url, replica_id="contract")

    def flag() -> bool:
        row = execs.execute("SELECT armed FROM pod_sweeper.wakeup WHERE cluster = %s", (settings.cluster,)).fetchone()
        assert row is not None
        return bool(row["armed"])

    async def on_postgres() -> list[Any]:
        async with outbox_stores(settings, "contract") as (store,):
            async with store.pool.connection() as conn:
                await outbox.cluster_rows(conn, cluster=settings.cluster)
            return await flag_scenario(Postgres(execs, store), flag)

    real = asyncio.run(on_postgres())
    memory = Memory()
    held_to(real, asyncio.run(flag_scenario(memory, lambda: memory.memory.armed)))
    assert [step[-1] for step in real] == [True, True, False, True, True]
    assert real[2][1] == ["s2"] and real[-1][1] == []


class Keeping(World, Protocol):
    """A world whose on-call holds and pauses, and where a second replica claims beside the first."""

    second: SweepStore  # another replica's store on the same outbox (``MemoryStore.view``)

    async def hold(self, sandbox: str, kept: bool = True) -> None: ...
    async def pause(self, kept: bool = True) -> None: ...
    async def discard(self, sandboxes: list[str]) -> list[str]: ...


class PostgresKeeping(Postgres):
    """The real holds and pauses (``store.admin.controls``, pod_sweeper.keeping) and a second replica's
    ``OutboxStore`` on the same database."""

    def __init__(self, conn: psycopg.Connection[Any], store: OutboxStore, second: OutboxStore, cluster: str) -> None:
        super().__init__(conn, store)
        self.second, self.cluster = second, cluster

    async def hold(self, sandbox: str, kept: bool = True) -> None:
        async with self.store.pool.connection() as conn:
            if kept:
                uid = self.conn.execute(
                    "SELECT pod_uid FROM pod_sweeper.outbox WHERE sandbox_id = %s", (sandbox,)
                ).fetchone()
                assert uid is not None
                window = controls.Window(length=timedelta(hours=1))
                await controls.hold(
                    conn,
                    cluster=self.cluster,
                    namespace="sandboxes",
                    name=f"pod-{sandbox}",
                    uid=uid["pod_uid"],
                    window=window,
                    reason="the contract",
                    actor="contract",
                )
            else:
                await controls.release(conn, cluster=self.cluster, namespace="sandboxes", name=f"pod-{sandbox}")

    async def discard(self, sandboxes: list[str]) -> list[str]:
        by_id = {row_id: sandbox for sandbox, row_id in ids(self).items()}
        async with self.store.pool.connection() as conn:
            discarded = await bulk.discard(conn, [row_id for row_id, s in by_id.items() if s in sandboxes])
        return sorted(by_id[row_id] for row_id in discarded)

    async def pause(self, kept: bool = True) -> None:
        async with self.store.pool.connection() as conn:
            if kept:
                window = controls.Window(length=timedelta(hours=1))
                await controls.pause(
                    conn, cluster=self.cluster, namespace="sandboxes", window=window, reason="the contract", actor="c"
                )
            else:
                await controls.unpause(conn, cluster=self.cluster, namespace="sandboxes")


class MemoryKeeping(Memory):
    """``MemoryStore.keep`` and ``MemoryStore.view``."""

    def __init__(self) -> None:
        super().__init__()
        self.second = self.memory.view("contract-b")

    async def hold(self, sandbox: str, kept: bool = True) -> None:
        row = next(r for r in self.memory.rows.values() if r.sandbox_id == sandbox)
        self.memory.keep(pod_uid=row.pod_uid, kept=kept)

    async def pause(self, kept: bool = True) -> None:
        self.memory.keep(namespace="sandboxes", kept=kept)

    async def discard(self, sandboxes: list[str]) -> list[str]:
        by_id = {r.id: r.sandbox_id for r in self.memory.rows.values()}
        return sorted(by_id[i] for i in self.memory.discard([i for i, s in by_id.items() if s in sandboxes]))


async def claim_on(store: SweepStore, batch: int) -> list[str]:
    async with store.session() as session:
        claimed = await session.claim(
            batch=batch,
            lease_seconds=30,
            disarm=True,
            at_claim=lambda c, checked: verdicts.at_claim(c, checked, POLICY),
            guard=None,
        )
    return sorted(c.sandbox_id for c in claimed.to_send)


async def not_due_now(world: World) -> bool:
    """Nothing due now: a kept row is not. (Not the value: PostgreSQL counts the hold's or the pause's end as
    a due time, the memory store's holds and pauses have none, and it answers None when only they are left.)"""
    due = await next_due(world)
    return due is None or due > 1


async def keeping_scenario(world: Keeping) -> list[Any]:
    """A discard, a hold, a pause, their ends, and two replicas claiming beside each other."""
    seen: list[Any] = []
    for sandbox in SANDBOXES:
        world.retire(sandbox)
    seen.append(("the on-call discards a pending row", await world.discard(["s4"]), world.rows()))
    await world.hold("s1")
    seen.append(("the second replica claims past the hold", await claim_on(world.second, 2), world.rows()))
    seen.append(("a discard leaves a claimed row alone", await world.discard(["s0"]), world.rows()))
    seen.append(("the first takes the rest but the held", await claim_on(world.store, 10), world.rows()))
    seen.append(("the held row is not due", await not_due_now(world)))
    await world.hold("s1", kept=False)
    await world.pause()
    seen.append(("a pause keeps the released row", await claim_on(world.store, 10), await not_due_now(world)))
    await world.pause(kept=False)
    seen.append(("the pause's end frees it, for either replica", await claim_on(world.second, 10), world.rows()))
    return seen


def both_ways(scenario: Any, execs: psycopg.Connection[Any], db_url: str) -> list[Any]:
    """Run ``scenario`` on PostgreSQL (two replicas' ``OutboxStore``s on one pool) and on the memory store,
    hold every step's outcome of the one to the other's, and return PostgreSQL's."""
    settings = settings_for(db_url, replica_id="contract")

    async def on_postgres() -> list[Any]:
        async with outbox_stores(settings, "contract", "contract-b") as (first, second):
            return list(await scenario(PostgresKeeping(execs, first, second, settings.cluster)))

    real = asyncio.run(on_postgres())
    held_to(real, asyncio.run(scenario(MemoryKeeping())))
    return real


def test_holds_pauses_and_a_second_replica_answer_as_the_real_ones(execs: psycopg.Connection[Any], db_url: str) -> None:
    """``MemoryStore.keep`` (holds and pauses), ``MemoryStore.discard`` and ``MemoryStore.view`` (another
    replica on the same outbox), which the simulator (tests/sim) leans on, held to pod_sweeper.keeping,
    sql/discard.sql and a second ``OutboxStore``."""
    real = both_ways(keeping_scenario, execs, db_url)
    # It reached what it meant to: each replica claimed, the hold and the pause each kept a row back.
    assert real[0][1] == ["s4"] and real[0][2]["s4"][:2] == ("done", "discarded")
    assert real[1][1] == ["s0", "s2"] and real[2][1] == [] and real[3][1] == ["s3"] and real[5][1] == []
    assert real[6][1] == ["s1"] and real[6][2]["s1"][4] == "contract-b"


async def reasons(world: Keeping) -> dict[str, str]:
    """Each open row's reason, by sandbox: sql/row_waits.sql on PostgreSQL, ``row_reasons`` in memory."""
    by_id = {row_id: sandbox for sandbox, row_id in ids(world).items()}
    if isinstance(world, MemoryKeeping):
        found = world.memory.row_reasons()
    else:
        assert isinstance(world, PostgresKeeping)
        async with world.store.pool.connection() as conn:
            found = await waits.row_reasons(conn, list(by_id))
    return {by_id[row_id]: reason for row_id, reason in sorted(found.items())}


async def reasons_scenario(world: Keeping) -> list[Any]:
    """A row claimed, rows backing off after a 401, a 403 and a 503, a held row; then a pause over them,
    its end, and the breaker tripped: each open row's one reason after each."""
    seen: list[Any] = []
    for sandbox in SANDBOXES:
        world.retire(sandbox)
    seen.append(("due", await reasons(world)))
    claimed = by_sandbox((await claim(world, 4)).to_send)
    await record(
        world,
        [
            Verdict(claimed[s].id, claimed[s].epoch, Result.RETRY, delay=600, error=f"{status}", http_status=status)
            for s, status in (("s1", 401), ("s2", 403), ("s3", 503))
        ],
    )
    await world.hold("s4")
    seen.append(("claimed, backing off by the answer, held", await reasons(world)))
    await world.pause()
    seen.append(("a pause outranks all but the claim and the hold", await reasons(world)))
    await world.pause(kept=False)
    async with world.store.session() as session, session.transaction():
        await session.trip_breaker("the contract")
    seen.append(("the breaker outranks the backoffs", await reasons(world)))
    return seen


def test_each_open_rows_reason_answers_as_sql_row_waits(execs: psycopg.Connection[Any], db_url: str) -> None:
    """``MemoryStore.row_reasons``, what the simulator checks the rows' reasons by, held to
    sql/row_waits.sql (``explain``'s and ``status``'s) for the reasons the memory store keeps."""
    real = both_ways(reasons_scenario, execs, db_url)
    # Each reason the memory store keeps was reached, in the order core.waits.ROW_ORDER states.
    assert real[1][1] == {
        "s0": "claimed",
        "s1": "kube_unauthorized",
        "s2": "namespace_refused",
        "s3": "backoff",
        "s4": "held",
    }
    assert real[2][1] == {"s0": "claimed", "s1": "paused", "s2": "paused", "s3": "paused", "s4": "held"}
    assert real[3][1] == {"s0": "claimed", "s1": "breaker", "s2": "breaker", "s3": "breaker", "s4": "held"}


async def outage(world: Keeping, replica: str, reason: str | None, closed_for: float = 0.0) -> None:
    """The outage watch's writes: sql/outage_report.sql (``reason``) or sql/outage_clear.sql (None) on
    PostgreSQL, ``report_outage`` or ``clear_outage`` in memory."""
    if isinstance(world, MemoryKeeping):
        if reason is None:
            world.memory.clear_outage(cluster="contract", replica=replica)
        else:
            world.memory.report_outage(cluster="contract", replica=replica, reason=reason, closed_for=closed_for)
        world.clock.advance(0.001)  # its own transaction
        return
    assert isinstance(world, PostgresKeeping)
    async with world.store.pool.connection() as conn:
        if reason is None:
            await outages.clear_outage(conn, cluster=world.cluster, replica=replica)
        else:
            await outages.report_outage(
                conn, cluster=world.cluster, replica=replica, reason=reason, closed_for=closed_for
            )


def outage_rows(world: Keeping) -> list[tuple[str, str, float]]:
    """The outage reports, by replica: its reason and ``since``'s seconds before ``probed_at``."""
    if isinstance(world, MemoryKeeping):
        found = [(r, o.reason, o.probed_at - o.since) for (_, r), o in world.memory.outages.items()]
    else:
        assert isinstance(world, PostgresKeeping)
        rows = world.conn.execute(
            "SELECT replica, reason, extract(epoch FROM probed_at - since)::float8 AS closed"
            " FROM pod_sweeper.outages WHERE cluster = %s",
            (world.cluster,),
        ).fetchall()
        found = [(r["replica"], r["reason"], r["closed"]) for r in rows]
    return sorted(found)


def probed_earlier(world: Keeping, replica: str, seconds: float) -> None:
    """The replica's outage report as if last probed ``seconds`` earlier (no replica renewed it)."""
    if isinstance(world, MemoryKeeping):
        world.memory.outages[("contract", replica)].probed_at -= seconds
        return
    assert isinstance(world, PostgresKeeping)
    world.conn.execute(
        "UPDATE pod_sweeper.outages SET probed_at = probed_at - make_interval(secs => %s) WHERE replica = %s",
        (seconds, replica),
    )


async def outage_scenario(world: Keeping) -> list[Any]:
    """The outage watch's row, reported, renewed, cleared, gone stale: each open row's reason after each
    (a claim, a hold and the breaker outrank it; it outranks the backoffs and a due row), and the reports."""
    seen: list[Any] = []
    for sandbox in SANDBOXES:
        world.retire(sandbox)
    claimed = by_sandbox((await claim(world, 3)).to_send)
    await record(
        world,
        [
            Verdict(claimed[s].id, claimed[s].epoch, Result.RETRY, delay=600, error=f"{status}", http_status=status)
            for s, status in (("s1", 401), ("s2", 503))
        ],
    )
    await world.hold("s3")
    seen.append(("no report", await reasons(world), outage_rows(world)))
    await outage(world, "contract", "probe: no answer", closed_for=3.0)
    seen.append(("a report keeps all but the claim and the hold", await reasons(world), outage_rows(world)))
    await outage(world, "contract", "probe: 503", closed_for=9.0)
    renewed = [(r, reason, closed > 3.0 and closed < 9.0) for r, reason, closed in outage_rows(world)]
    seen.append(("renewed: its first since kept, the new reason", renewed))
    await outage(world, "contract-b", "probe: refused", closed_for=0.0)
    await outage(world, "contract", None)
    seen.append(("cleared, another replica's report keeps them", await reasons(world), len(outage_rows(world))))
    await trip_or_reset(world, "the contract")
    seen.append(("the breaker outranks it", await reasons(world)))
    await trip_or_reset(world, None)
    probed_earlier(world, "contract-b", 121.0)
    seen.append(("a report not renewed for 2 minutes keeps none", await reasons(world), len(outage_rows(world))))
    await outage(world, "contract-b", None)
    seen.append(("every report cleared", await reasons(world), outage_rows(world)))
    return seen


def test_the_outage_watchs_row_and_its_reason_answer_as_the_real_ones(
    execs: psycopg.Connection[Any], db_url: str
) -> None:
    """``MemoryStore.report_outage``, ``clear_outage`` and ``row_reasons``'s ``kube_unreachable``, the
    simulator's outage watch's row, held to sql/outage_report.sql, sql/outage_clear.sql and
    sql/row_waits.sql."""
    real = both_ways(outage_scenario, execs, db_url)
    backoffs = {"s0": "claimed", "s1": "kube_unauthorized", "s2": "backoff", "s3": "held", "s4": "due"}
    assert real[0][1:] == (backoffs, [])
    unreachable = {"s0": "claimed", "s1": "kube_unreachable", "s2": "kube_unreachable", "s3": "held"}
    assert real[1][1] == unreachable | {"s4": "kube_unreachable"}
    assert real[2][1] == [("contract", "probe: 503", True)] and real[3][1:] == (real[1][1], 1)
    assert real[4][1] == {"s0": "claimed", "s1": "breaker", "s2": "breaker", "s3": "held", "s4": "breaker"}
    assert real[5][1:] == (backoffs, 1) and real[6][1:] == (backoffs, [])


# The confirmation's columns, per sandbox: set or not (times differ between the two clocks).
CONFIRMING = ("done_at", "confirm_after", "confirmed_at", "stuck_at")


def confirming(world: Keeping) -> dict[str, tuple[bool, ...]]:
    if isinstance(world, MemoryKeeping):
        found = {r.sandbox_id: tuple(getattr(r, c) is not None for c in CONFIRMING) for r in world.memory.rows.values()}
    else:
        assert isinstance(world, PostgresKeeping)
        rows = world.conn.execute("SELECT * FROM pod_sweeper.outbox").fetchall()
        found = {r["sandbox_id"]: tuple(r[c] is not None for c in CONFIRMING) for r in rows}
    return dict(sorted(found.items()))


async def take_terminating(world: Keeping, *, wait: bool = False) -> list[tuple[str, float]]:
    """sql/confirm_claim.sql on PostgreSQL, ``take_terminating`` in memory: the sandboxes taken, with their
    ages. ``wait``: until the database's clock makes one due (PostgreSQL's moves by itself)."""
    by_id = {row_id: sandbox for sandbox, row_id in ids(world).items()}
    if isinstance(world, MemoryKeeping):
        if wait:
            due = [r.confirm_after for r in world.memory.rows.values() if r.confirm_after is not None]
            world.clock.advance(max(0.0, min(due) - world.clock()))
        taken = world.memory.take_terminating(batch=10, recheck_seconds=30)
    else:
        assert isinstance(world, PostgresKeeping)
        deadline = time.monotonic() + 10
        while True:
            async with world.store.pool.connection() as conn:
                taken = await terminating.take_due(conn, cluster=world.cluster, batch=10, recheck_seconds=30)
            if taken or not wait:
                break
            assert time.monotonic() < deadline, "nothing fell due"
            await asyncio.sleep(0.05)
    return sorted((by_id[row.id], row.age_seconds) for row in taken)


async def record_terminating(world: Keeping, found: dict[str, tuple[bool, bool]]) -> None:
    row_ids = ids(world)
    args = {
        "ids": [row_ids[s] for s in found],
        "gone": [gone for gone, _ in found.values()],
        "stuck": [stuck for _, stuck in found.values()],
    }
    if isinstance(world, MemoryKeeping):
        world.memory.record_terminating(**args)
    else:
        assert isinstance(world, PostgresKeeping)
        async with world.store.pool.connection() as conn:
            await terminating.record(conn, cluster=world.cluster, **args)


async def confirming_scenario(world: Keeping) -> list[Any]:
    """Deletes that left their pods terminating (a grace period), one gone at once, one retried; the
    confirmer's take once the grace has passed, with each row's age on the database's clock, and its
    record of a pod gone and one stuck."""
    seen: list[Any] = []
    for sandbox in SANDBOXES:
        world.retire(sandbox)
    claimed = by_sandbox((await claim(world, 5)).to_send)

    def deleted(sandbox: str, confirm_in: float | None) -> Verdict:
        c = claimed[sandbox]
        return Verdict(c.id, c.epoch, Result.DELETED, http_status=200, confirm_in=confirm_in)

    s3 = claimed["s3"]
    await record(
        world,
        [
            deleted("s0", 0.3),
            deleted("s1", None),
            deleted("s2", 600),
            Verdict(s3.id, s3.epoch, Result.RETRY, delay=600, error="503", http_status=503),
            deleted("s4", 0.3),
        ],
    )
    seen.append(("recorded: terminating, gone at once, retried", world.rows(), confirming(world)))
    seen.append(("no grace has passed", await take_terminating(world)))
    taken = await take_terminating(world, wait=True)
    seen.append(("the graces passed", [s for s, _ in taken], all(0.299 < age < 5 for _, age in taken)))
    await record_terminating(world, {"s0": (True, False), "s4": (False, True)})
    seen.append(("one gone, one stuck", confirming(world)))
    seen.append(("the stuck one is put off", await take_terminating(world)))
    return seen


def test_the_confirmers_statements_answer_as_the_real_ones(execs: psycopg.Connection[Any], db_url: str) -> None:
    """``MemoryStore.take_terminating`` and ``record_terminating``, the simulator's confirmer's database,
    held to sql/confirm_claim.sql and sql/confirm_result.sql, and the confirmation's columns a record
    writes (sql/record_results.sql) held to the memory store's."""
    real = both_ways(confirming_scenario, execs, db_url)
    assert real[0][2] == {
        "s0": (True, True, False, False),
        "s1": (True, False, True, False),
        "s2": (True, True, False, False),
        "s3": (False, False, False, False),
        "s4": (True, True, False, False),
    }
    assert real[1][1] == [] and real[2][1:] == (["s0", "s4"], True) and real[4][1] == []
    assert real[3][1]["s0"] == (True, False, True, False) and real[3][1]["s4"] == (True, True, False, True)


async def arrivals(
    world: Keeping, *, dry_run: bool = False, shadow: tuple[str, ...] = (), transaction_rows: int = 0
) -> tuple[int, str | None]:
    """sql/breaker_arrivals.sql on PostgreSQL, ``MemoryStore.arrivals`` in memory, over a window of a minute
    (every retire of the scenario is in it, on either clock): the count, and the breaker's reason."""
    args = {"window": 60.0, "dry_run": dry_run, "shadow": shadow, "transaction_rows": transaction_rows}
    if isinstance(world, MemoryKeeping):
        return world.memory.arrivals(**args), world.memory.tripped
    assert isinstance(world, PostgresKeeping)
    async with world.store.pool.connection() as conn:
        seen = await rates.arrivals(conn, cluster=world.cluster, **args)
    assert seen is not None
    return seen.arrived, seen.tripped_reason


async def recent_rate(world: Keeping) -> float:
    """sql/breaker_recent_rate.sql on PostgreSQL, ``MemoryStore.recent_rate`` in memory (ten minutes)."""
    if isinstance(world, MemoryKeeping):
        return world.memory.recent_rate(seconds=600.0)
    assert isinstance(world, PostgresKeeping)
    async with world.store.pool.connection() as conn:
        return await rates.recent_rate(conn, cluster=world.cluster, seconds=600.0)


async def trip_or_reset(world: Keeping, reason: str | None) -> None:
    """sql/breaker_trip.sql (``reason``) or sql/breaker_reset.sql (None); ``trip`` and ``reset_breaker``."""
    if isinstance(world, MemoryKeeping):
        if reason is None:
            world.memory.reset_breaker()
            world.clock.advance(0.001)  # its own transaction: a retire after it comes after it
        else:
            world.memory.trip(reason)
        return
    assert isinstance(world, PostgresKeeping)
    async with world.store.pool.connection() as conn:
        if reason is None:
            await breaker.reset_breakers(conn, cluster=world.cluster, all_clusters=False, who="contract")
        else:
            await breaker.trip_breaker(conn, world.cluster, reason, "contract")


def enqueued_earlier(world: Keeping, sandbox: str, seconds: float) -> None:
    """The sandbox's row as if its retire had come ``seconds`` earlier (its ``enqueued_at`` moved back)."""
    if isinstance(world, MemoryKeeping):
        (row,) = [row for row in world.memory.rows.values() if row.sandbox_id == sandbox]
        row.enqueued_at -= seconds
        return
    assert isinstance(world, PostgresKeeping)
    world.conn.execute(
        "UPDATE pod_sweeper.outbox SET enqueued_at = enqueued_at - make_interval(secs => %s) WHERE sandbox_id = %s",
        (seconds, sandbox),
    )


async def surge_scenario(world: Keeping) -> list[Any]:
    """What the breaker's surge watch reads and writes: arrivals as a hold, a pause, dry run, a shadow
    namespace and the transaction rule count them, as the rows are claimed, deleted, retried, recorded as
    would_delete and discarded; the recent rate; a trip that keeps its first reason; a reset after which
    nothing before it counts."""
    seen: list[Any] = []
    for sandbox in SANDBOXES:
        world.retire(sandbox)
    seen.append(("five retires arrived", await arrivals(world), await recent_rate(world)))
    await world.hold("s1")
    seen.append(("a hold keeps one out", await arrivals(world)))
    await world.pause()
    seen.append(("a pause keeps them all out, not of the rate", await arrivals(world), await recent_rate(world)))
    await world.pause(kept=False)
    await world.hold("s1", kept=False)
    seen.append(
        (
            "dry run, a shadow namespace, another",
            await arrivals(world, dry_run=True),
            await arrivals(world, shadow=("sandboxes",)),
            await arrivals(world, shadow=("elsewhere",)),
        )
    )
    seen.append(
        (
            "each retire its own transaction",
            await arrivals(world, transaction_rows=1),
            await arrivals(world, transaction_rows=2),
        )
    )
    claimed = by_sandbox((await claim(world, 3)).to_send)
    seen.append(("three claimed", await arrivals(world)))
    await record(
        world,
        [
            Verdict(claimed["s0"].id, claimed["s0"].epoch, Result.DELETED, http_status=200),
            Verdict(claimed["s1"].id, claimed["s1"].epoch, Result.RETRY, delay=600, error="503", http_status=503),
            Verdict(claimed["s2"].id, claimed["s2"].epoch, Result.WOULD_DELETE),
        ],
    )
    await world.discard(["s4"])
    seen.append(("deleted, retried, would_delete, discarded", await arrivals(world), await recent_rate(world)))
    enqueued_earlier(world, "s3", 120.0)
    seen.append(("one older than the window, not of the rate's", await arrivals(world), await recent_rate(world)))
    await trip_or_reset(world, "the first surge")
    await trip_or_reset(world, "a second look")
    seen.append(("tripped once, its first reason kept", await arrivals(world)))
    await trip_or_reset(world, None)
    seen.append(("reset: nothing before it counts", await arrivals(world), await recent_rate(world)))
    await trip_or_reset(world, None)
    world.activate("s3")  # its claim finds it active again (skipped_active), and its next retire reopens it
    seen.append(("s3 skipped at its claim", [c.sandbox_id for c, _ in (await claim(world, 5)).decided]))
    world.retire("s3")
    world.retire("s0")  # a pod whose row ended deleted: the trigger leaves it as it is
    seen.append(("reset again, untripped; a retire after it counts", await arrivals(world), await recent_rate(world)))
    return seen


def test_the_surge_watchs_statements_answer_as_the_real_ones(execs: psycopg.Connection[Any], db_url: str) -> None:
    """``MemoryStore.arrivals``, ``recent_rate``, ``trip`` and ``reset_breaker``, the simulator's surge
    watch's database, held to sql/breaker_arrivals.sql, sql/breaker_recent_rate.sql, sql/breaker_trip.sql
    and sql/breaker_reset.sql."""
    real = both_ways(surge_scenario, execs, db_url)
    rate = 5 / 600
    assert real[0][1:] == ((5, None), rate) and real[1][1] == (4, None) and real[2][1:] == ((0, None), rate)
    assert real[3][1:] == ((0, None), (0, None), (5, None)) and real[4][1:] == ((0, None), (5, None))
    assert real[5][1] == (5, None) and real[6][1:] == ((4, None), rate)
    assert real[7][1:] == ((3, None), rate)
    assert real[8][1] == (3, "the first surge") and real[9][1:] == ((0, None), rate)
    assert real[10][1] == ["s3"] and real[11][1:] == ((1, None), rate)


# The replication guard (migration 0014) on one server: no standby is connected, so a guard naming one
# holds every claim (the flushed case needs a streaming standby: tests/failover's tier starts one, at the
# cost of a base backup; the simulator's standbys are held to the same rule, sql/claim.sql's, through
# ``MemoryStore.guard_keeps_back``). A standby's name no server has.
NO_STANDBY = "contract-standby"


class Guarded(World, Protocol):
    async def mark(self) -> int: ...
    def marks(self) -> dict[str, bool]: ...
    async def guard_reasons(self) -> dict[str, str]: ...
    async def beat(self) -> None: ...


class PostgresGuarded(Postgres):
    """The real guard: sql/guard_mark.sql, sql/claim.sql and sql/next_due.sql with ``guard``, sql/row_waits.sql
    reading the replicas' guard from their heartbeats (``pod_sweeper.replicas``)."""

    def __init__(self, conn: psycopg.Connection[Any], store: OutboxStore, cluster: str) -> None:
        super().__init__(conn, store)
        self.cluster = cluster

    async def mark(self) -> int:
        async with self.store.session() as session:
            return await session.guard_mark()

    def marks(self) -> dict[str, bool]:
        found = self.conn.execute(
            "SELECT sandbox_id, guard_lsn IS NOT NULL AND guard_enqueued_at = enqueued_at AS vouches"
            " FROM pod_sweeper.outbox"
        ).fetchall()
        return {r["sandbox_id"]: r["vouches"] for r in found}

    async def guard_reasons(self) -> dict[str, str]:
        by_id = {row_id: sandbox for sandbox, row_id in ids(self).items()}
        async with self.store.pool.connection() as conn:
            found = await waits.row_reasons(conn, list(by_id))
        return {by_id[row_id]: reason for row_id, reason in sorted(found.items())}

    named = NO_STANDBY  # the standby its guard names

    async def beat(self) -> None:
        beat = presence.Beat(
            "contract", "h", "0", 20, self.cluster, None, False, None, (self.named,), 100.0, 8, True, {}, 60.0, 1.0
        )
        async with self.store.pool.connection() as conn:
            await presence.beat(conn, beat)


class MemoryGuarded(Memory):
    """``MemoryStore``'s guard: no standby connected (``replication.standbys`` empty)."""

    def __init__(self) -> None:
        super().__init__()
        self.memory.guard = [NO_STANDBY]
        self.fleet = False

    async def mark(self) -> int:
        async with self.store.session() as session:
            return await session.guard_mark()

    def marks(self) -> dict[str, bool]:
        rows = self.memory.rows.values()
        return {r.sandbox_id: r.guard_lsn is not None and r.guard_enqueued_at == r.enqueued_at for r in rows}

    async def guard_reasons(self) -> dict[str, str]:
        by_id = {r.id: r.sandbox_id for r in self.memory.rows.values()}
        guards = [[NO_STANDBY]] if self.fleet else []
        found = self.memory.row_reasons(guards=guards, fleet=self.fleet)
        return {by_id[row_id]: reason for row_id, reason in sorted(found.items())}

    async def beat(self) -> None:
        self.fleet = True


async def guarded_claim(world: World, guard: list[str] | None) -> list[str]:
    async with world.store.session() as session:
        claimed = await session.claim(
            batch=10,
            lease_seconds=30,
            disarm=True,
            at_claim=lambda c, checked: verdicts.at_claim(c, checked, POLICY),
            guard=guard,
        )
    decided = sorted(f"{c.sandbox_id}:{v.result}" for c, v in claimed.decided)
    return sorted(c.sandbox_id for c in claimed.to_send) + decided


async def guard_scenario(world: Guarded) -> list[Any]:
    """Rows marked, a guard naming a standby that is not connected holding every claim and putting the
    next look off by the recheck's backoff, the marks after a claim and a reopen, and each row's reason
    with no replica known and with one whose guard names that standby."""
    seen: list[Any] = []
    for sandbox in SANDBOXES[:3]:
        world.retire(sandbox)
    seen.append(("no mark yet, no replica known: due", world.marks(), await world.guard_reasons()))
    seen.append(("unmarked rows are due to the guard's next-due read", (await next_due(world) or 1.0) <= 0))
    seen.append(("the mark takes every open row", await world.mark(), world.marks()))
    seen.append(("a mark with no replica known keeps the row back", await world.guard_reasons()))
    seen.append(("marked again: nothing", await world.mark()))
    seen.append(("a standby not connected holds every claim", await guarded_claim(world, [NO_STANDBY])))
    looks = [await next_due(world) for _ in range(2)]
    seen.append(("and the next look is the recheck's", *(None if d is None else round(d, 3) for d in looks)))
    world.activate("s1")
    seen.append(("without the guard, claimed", await guarded_claim(world, None), world.rows()))
    world.retire("s1")  # ended skipped_active: the retire reopens it, and its mark vouches no more
    seen.append(("a reopen's mark is stale", world.marks(), world.rows()))
    await world.beat()
    seen.append(("a live replica's guard names the standby", await world.guard_reasons()))
    seen.append(("the reopened row is marked again", await world.mark(), world.marks()))
    seen.append(("and still held", await guarded_claim(world, [NO_STANDBY]), await world.guard_reasons()))
    return seen


def test_the_replication_guards_mark_claim_and_reason_answer_as_the_real_ones(
    execs: psycopg.Connection[Any], db_url: str
) -> None:
    """``MemoryStore``'s replication guard, which the simulator runs with standbys that fall behind, held to
    sql/guard_mark.sql, sql/claim.sql's and sql/next_due.sql's ``guard`` and sql/row_waits.sql's guard on
    one server: a standby that is not connected holds every claim; which rows a mark takes, and that a
    reopen needs a new one; the recheck interval; each row's reason."""
    assert memstore.GUARD_RECHECK_SECONDS == (outbox.GUARD_RECHECK_MIN_SECONDS, outbox.GUARD_RECHECK_MAX_SECONDS)
    settings = settings_for(db_url, replica_id="contract")

    async def on_postgres() -> list[Any]:
        async with outbox_stores(settings, "contract", guard=[NO_STANDBY]) as (store,):
            return await guard_scenario(PostgresGuarded(execs, store, settings.cluster))

    real = asyncio.run(on_postgres())
    held_to(real, asyncio.run(guard_scenario(MemoryGuarded())))
    # It reached what it meant to: marks, a held claim, the recheck's backoff, a reopen, the guard's reason.
    assert real[2][1] == 3 and real[5][1] == [] and real[6][1:] == (0.05, 0.1)
    assert real[3][1] == {"s0": "replication_guard", "s1": "replication_guard", "s2": "replication_guard"}
    assert real[7][1] == ["s0", "s2", "s1:skipped_active"] and real[8][2]["s1"][0] == "pending"
    assert real[8][1] == {"s0": True, "s1": False, "s2": True}
    assert real[9][1] == {"s0": "claimed", "s1": "replication_guard", "s2": "claimed"}
    assert real[10][1] == 1 and real[11][1] == []


# --- the breaker's transaction rule (migration 0020; harness.memlarge, the simulator's) -----------------

# POD_SWEEPER_BREAKER_TRANSACTION_ROWS in the scenario: a transaction of three rows is large, of two not.
LARGE_ROWS = 3
# Four more sandboxes than SANDBOXES: three transactions of two or three rows each, and one row alone.
MORE_SANDBOXES = [f"s{i}" for i in range(5, 13)]


class Large(Keeping, Protocol):
    def retire_together(self, sandboxes: list[str]) -> None: ...
    def kept_back(self) -> dict[str, bool]: ...
    async def end(self, transaction: int, how: str) -> tuple[int, int] | None: ...


class PostgresLarge(PostgresKeeping):
    """The real rule: sql/breaker_transaction.sql in ``OutboxStore``'s claim, sql/large_transaction_keep.sql,
    sql/large_transaction_end.sql (``controls.end_transaction``) and sql/row_waits.sql's ``large_transaction``;
    several executions retired in one statement, so in one host transaction."""

    def __init__(self, conn: psycopg.Connection[Any], store: OutboxStore, second: OutboxStore, cluster: str) -> None:
        super().__init__(conn, store, second, cluster)
        for sandbox in MORE_SANDBOXES:
            conn.execute(
                "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
                " VALUES (%s, 1, 'sandboxes', %s, %s, true)",
                (sandbox, f"pod-{sandbox}", uuid.uuid4()),
            )

    def retire_together(self, sandboxes: list[str]) -> None:
        self.conn.execute("UPDATE executions SET active = false WHERE sandbox_id = ANY(%s)", (sandboxes,))

    def kept_back(self) -> dict[str, bool]:
        found = self.conn.execute(
            "SELECT sandbox_id, next_attempt_at = pod_sweeper.kept_back_until() AS kept FROM pod_sweeper.outbox"
        ).fetchall()
        return dict(sorted((r["sandbox_id"], r["kept"]) for r in found))

    async def end(self, transaction: int, how: str) -> tuple[int, int] | None:
        async with self.store.pool.connection() as conn:
            ended = await controls.end_transaction(conn, transaction, how=how, actor="contract")
        return None if ended is None else (int(ended["open_rows"]), int(ended["discarded"]))


class MemoryLarge(MemoryKeeping):
    """``harness.memlarge`` behind ``MemoryStore``: each transaction's rows retired at one instant."""

    def retire_together(self, sandboxes: list[str]) -> None:
        transaction = self.memory.transactions.begin()
        for sandbox in sandboxes:
            self.memory.retire(sandbox, uid=uuid.uuid5(uuid.NAMESPACE_OID, sandbox), transaction=transaction)
        self.clock.advance(0.001)

    def kept_back(self) -> dict[str, bool]:
        rows = self.memory.rows.values()
        return dict(sorted((r.sandbox_id, r.next_attempt_at == memlarge.KEPT_BACK_UNTIL) for r in rows))

    async def end(self, transaction: int, how: str) -> tuple[int, int] | None:
        ended = self.memory.end_transaction(transaction, how=how)
        return None if ended is None else (ended["open_rows"], ended["discarded"])


async def claim_large(world: Large, store: SweepStore, batch: int) -> tuple[list[str], int | None, int | None]:
    """A claim with the transaction rule, as the claimer's turn makes it: the rows it took, or, when it found
    a large transaction, nothing, the size it found and the transaction's id once kept back (None: found
    by another before)."""
    async with store.session() as session:
        try:
            async with session.transaction():
                claimed = await session.claim(
                    batch=batch,
                    lease_seconds=30,
                    disarm=True,
                    at_claim=lambda c, checked: verdicts.at_claim(c, checked, POLICY),
                    guard=None,
                    transaction_rows=LARGE_ROWS,
                )
        except LargeTransaction as large:
            return [], large.size, await session.keep_back_transaction(large.at, large.size, "the contract")
    return sorted(c.sandbox_id for c in claimed.to_send), None, None


async def large_scenario(world: Large) -> list[Any]:
    """A transaction of three rows found by the first claim of two of them and kept back (nothing claimed),
    one of two rows and one row alone claimed, a second large one found by the next claim, each open
    row's reason, the first released and claimed then, the second discarded, an end only once."""
    seen: list[Any] = []
    world.retire_together(["s0", "s1", "s2"])
    world.retire("s3")
    world.retire_together(["s4", "s5"])
    world.retire_together(["s6", "s7", "s8"])
    first = await claim_large(world, world.store, 2)
    seen.append(("the first claim finds three rows of one transaction", first[:2], world.rows(), world.kept_back()))
    second = await claim_large(world, world.second, 10)
    seen.append(("the next finds the last three", second[:2], world.rows(), world.kept_back()))
    seen.append(("the rest are claimed, two of a smaller one", await claim_large(world, world.store, 10)))
    seen.append(("kept back, not due", await reasons(world), await not_due_now(world)))
    assert first[2] is not None and second[2] is not None
    seen.append(("released", await world.end(first[2], "released"), world.kept_back(), await reasons(world)))
    seen.append(("a released one is claimed, not judged again", await claim_large(world, world.second, 10)))
    seen.append(("discarded", await world.end(second[2], "discarded"), world.rows(), await reasons(world)))
    seen.append(("once", await world.end(second[2], "released"), await world.end(first[2], "discarded")))
    world.retire("s9")
    world.retire_together(["s10", "s11", "s12"])
    cut = await claim_large(world, world.store, 2)
    seen.append(("a full claim's one row of a transaction of three: found", cut[:2], world.kept_back()))
    return seen


def test_the_transaction_rules_claim_keep_and_end_answer_as_the_real_ones(
    execs: psycopg.Connection[Any], db_url: str
) -> None:
    """``harness.memlarge`` (the breaker's transaction rule in the memory store, which the simulator runs)
    held to sql/breaker_transaction.sql in ``OutboxStore``'s claim, sql/large_transaction_keep.sql,
    sql/large_transaction_end.sql and sql/row_waits.sql's ``large_transaction``."""
    settings = settings_for(db_url, replica_id="contract")

    async def on_postgres() -> list[Any]:
        async with outbox_stores(settings, "contract", "contract-b") as (first, second):
            return await large_scenario(PostgresLarge(execs, first, second, settings.cluster))

    real = asyncio.run(on_postgres())
    held_to(real, asyncio.run(large_scenario(MemoryLarge())))
    # It reached what it meant to: two found, nothing claimed with them, the smaller and the lone claimed.
    assert real[0][1] == ([], 3) and real[1][1] == ([], 3) and real[2][1] == (["s3", "s4", "s5"], None, None)
    assert real[3][1]["s0"] == "large_transaction" and real[3][1]["s8"] == "large_transaction"
    assert real[3][1]["s3"] == "claimed" and real[3][2]
    assert real[4][1] == (3, 0) and real[5][1] == (["s0", "s1", "s2"], None, None)
    assert real[6][1] == (3, 3) and real[6][2]["s6"][:2] == ("done", "discarded") and real[7][1:] == (None, None)
    assert real[8][1] == ([], 3)  # s9 and one of the three taken: the batch's end judged, nothing claimed


# --- the reconciliation pass's statements (harness.memreconcile, the simulator's) ----------------------

UIDS = {name: str(uuid.UUID(int=i + 1)) for i, name in enumerate(("r", "a", "n", "h", "o"))}


def sighting(sandbox: str, *, name: str | None = None, generation: int = 1) -> quarantine.Sighting:
    return quarantine.Sighting(UIDS[sandbox], "sandboxes", name or f"pod-{sandbox}", sandbox, generation, 1, "retired")


class Reconciling(Protocol):
    def execution(self, sandbox: str, *, active: bool) -> None: ...
    def retire(self, sandbox: str) -> None: ...
    async def hold(self, sandbox: str) -> None: ...
    async def generations(self, sandboxes: list[str]) -> list[tuple[str, int | None]]: ...
    async def begin(self, replica: str, *, gap: float) -> datetime | None: ...
    async def sight(self, sightings: list[quarantine.Sighting], started_at: datetime, wait: float) -> list[str]: ...
    async def forget(self, sandboxes: list[str]) -> None: ...
    async def enqueue(self, sandboxes: list[str]) -> int: ...
    async def prune(self, started_at: datetime) -> None: ...
    async def finish(self, replica: str, started_at: datetime) -> int | None: ...
    def suspects(self) -> list[str]: ...
    def rows(self) -> dict[str, tuple[str, str]]: ...
    def tick(self) -> None: ...


class PostgresReconciling:
    """sql/reconcile_*.sql through ``store.sweep.quarantine``, and ``recheck.generations``, on PostgreSQL."""

    def __init__(self, conn: psycopg.Connection[Any], pool: Any, cluster: str) -> None:
        self.conn, self.pool, self.cluster = conn, pool, cluster
        conn.execute("DELETE FROM pod_sweeper.suspects")
        conn.execute(
            "UPDATE pod_sweeper.reconcile_state SET last_started_at = NULL, last_finished_at = NULL WHERE cluster = %s",
            (cluster,),
        )

    def execution(self, sandbox: str, *, active: bool) -> None:
        self.conn.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
            " VALUES (%s, 1, 'sandboxes', %s, %s, %s)",
            # A row inserted retired with its UID would be enqueued by the trigger: a retired one here never
            # recorded its pod's UID (the pass's case), an active one did.
            (sandbox, f"pod-{sandbox}", UIDS[sandbox] if active else None, active),
        )

    def retire(self, sandbox: str) -> None:
        self.conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (sandbox,))

    async def hold(self, sandbox: str) -> None:
        async with self.pool.connection() as conn:
            await controls.hold(
                conn,
                cluster=self.cluster,
                namespace="sandboxes",
                name=f"pod-{sandbox}",
                uid=uuid.UUID(UIDS[sandbox]),
                window=controls.Window(length=timedelta(hours=1)),
                reason="the contract",
                actor="contract",
            )

    async def generations(self, sandboxes: list[str]) -> list[tuple[str, int | None]]:
        async with self.pool.connection() as conn:
            attachments = await load_attachments(conn)
            found = await recheck.generations(conn, [(s, 1) for s in sandboxes], attachments)
        return [(state.value, attachment) for state, attachment in found]

    async def begin(self, replica: str, *, gap: float) -> datetime | None:
        async with self.pool.connection() as conn:
            return await quarantine.begin(conn, replica=replica, gap=gap, lease=600, cluster=self.cluster)

    async def sight(self, sightings: list[quarantine.Sighting], started_at: datetime, wait: float) -> list[str]:
        async with self.pool.connection() as conn:
            due = await quarantine.sight(conn, sightings, started_at=started_at, quarantine=wait, cluster=self.cluster)
        return sorted(s.sandbox_id for s in sightings if s.pod_uid in due)

    async def forget(self, sandboxes: list[str]) -> None:
        async with self.pool.connection() as conn:
            await quarantine.forget(conn, [UIDS[s] for s in sandboxes], cluster=self.cluster)

    async def enqueue(self, sandboxes: list[str]) -> int:
        async with self.pool.connection() as conn:
            return await quarantine.enqueue(conn, [UIDS[s] for s in sandboxes], cluster=self.cluster)

    async def prune(self, started_at: datetime) -> None:
        async with self.pool.connection() as conn:
            await quarantine.prune(conn, started_at=started_at, cluster=self.cluster)

    async def finish(self, replica: str, started_at: datetime) -> int | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                queries.load("reconcile_finish"),
                {
                    "seen": 1,
                    "enqueued": 0,
                    "error": None,
                    "replica": replica,
                    "started_at": started_at,
                    "cluster": self.cluster,
                },
            )
            row = await cur.fetchone()
        return None if row is None else int(row["last_suspects"])

    def suspects(self) -> list[str]:
        found = self.conn.execute("SELECT sandbox_id, pod_name FROM pod_sweeper.suspects").fetchall()
        return sorted(f"{r['sandbox_id']}:{r['pod_name']}" for r in found)

    def rows(self) -> dict[str, tuple[str, str]]:
        found = self.conn.execute("SELECT sandbox_id, reason, status FROM pod_sweeper.outbox").fetchall()
        return {r["sandbox_id"]: (r["reason"], r["status"]) for r in found}

    def tick(self) -> None:
        pass  # the database's clock moves by itself


class MemoryReconciling:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.memory = MemoryStore(self.clock, replica="contract")
        self.passes = MemoryReconcile(self.memory)

    def execution(self, sandbox: str, *, active: bool) -> None:
        self.passes.executions[(sandbox, 1)] = active

    def retire(self, sandbox: str) -> None:
        self.passes.executions[(sandbox, 1)] = False
        self.memory.retire(sandbox, name=f"pod-{sandbox}", uid=uuid.UUID(UIDS[sandbox]))

    async def hold(self, sandbox: str) -> None:
        self.memory.keep(pod_uid=uuid.UUID(UIDS[sandbox]))

    async def generations(self, sandboxes: list[str]) -> list[tuple[str, int | None]]:
        found = self.passes.generation_rows([(s, 1) for s in sandboxes])
        out: list[tuple[str, int | None]] = []
        for i in range(len(sandboxes)):
            state = {None: "no_execution_row", True: "active", False: "retired"}[found.get(i)]
            out.append((state, 1))
        return out

    async def begin(self, replica: str, *, gap: float) -> datetime | None:
        return self.passes.begin(replica=replica, gap=gap, lease=600)

    async def sight(self, sightings: list[quarantine.Sighting], started_at: datetime, wait: float) -> list[str]:
        due = self.passes.sight(sightings, started_at=started_at, quarantine=wait)
        return sorted(s.sandbox_id for s in sightings if s.pod_uid in due)

    async def forget(self, sandboxes: list[str]) -> None:
        self.passes.forget([UIDS[s] for s in sandboxes])

    async def enqueue(self, sandboxes: list[str]) -> int:
        return self.passes.enqueue([UIDS[s] for s in sandboxes])

    async def prune(self, started_at: datetime) -> None:
        self.passes.prune(started_at=started_at)

    async def finish(self, replica: str, started_at: datetime) -> int | None:
        return self.passes.finish(replica=replica, started_at=started_at, seen=1, enqueued=0, error=None)

    def suspects(self) -> list[str]:
        return sorted(f"{s.sighting.sandbox_id}:{s.sighting.pod_name}" for s in self.passes.suspects.values())

    def rows(self) -> dict[str, tuple[str, str]]:
        return {r.sandbox_id: (r.reason, r.status.value) for r in self.memory.rows.values()}

    def tick(self) -> None:
        self.clock.advance(0.01)


async def reconciling_scenario(world: Reconciling) -> list[Any]:
    """Two passes of two replicas: the lease and its gap, sightings and their quarantine (a changed name
    starts it again), a pass that outlived its lease, an enqueue past a hold and an open row, a prune."""
    seen: list[Any] = []
    world.execution("r", active=False)  # retired, its retire before the outbox (no row)
    world.execution("a", active=True)
    world.execution("h", active=False)
    world.execution("o", active=True)
    world.retire("o")  # the trigger's row: open
    await world.hold("h")
    seen.append(("the tables' answers", await world.generations(["r", "a", "n", "h"])))
    first = await world.begin("A", gap=0)
    world.tick()
    seen.append(("one pass at a time", first is not None, await world.begin("B", gap=0) is None))
    assert first is not None
    found = [sighting("r"), sighting("n"), sighting("h"), sighting("o")]
    seen.append(("first sightings are not due", await world.sight(found, first, 0), world.suspects()))
    world.tick()
    seen.append(("the pass ends", await world.finish("A", first)))
    world.tick()
    seen.append(("the gap", await world.begin("B", gap=600) is None))
    second = await world.begin("B", gap=0)
    assert second is not None
    world.tick()
    seen.append(("a pass that outlived its lease records nothing", await world.finish("A", first)))
    again = [sighting("r"), sighting("n", name="pod-n2"), sighting("h"), sighting("o")]
    seen.append(("seen again: due, but the renamed", await world.sight(again, second, 0), world.suspects()))
    seen.append(("a long quarantine is not over", await world.sight([sighting("r")], second, 600)))
    world.tick()
    seen.append(("enqueued past the hold and the open row", await world.enqueue(["r", "h", "o"]), world.rows()))
    seen.append(("held stays, others go", world.suspects()))
    await world.forget(["n"])
    seen.append(("forgotten", world.suspects()))
    world.tick()
    seen.append(("the second pass ends", await world.finish("B", second)))
    world.tick()
    third = await world.begin("A", gap=0)
    assert third is not None
    world.tick()
    await world.prune(third)
    seen.append(("a complete pass that saw none prunes them", world.suspects(), await world.finish("A", third)))
    return seen


def test_the_reconcilers_statements_answer_as_the_real_ones(execs: psycopg.Connection[Any], db_url: str) -> None:
    """``MemoryReconcile``, the simulator's reconciler's database, held to sql/reconcile_begin.sql,
    reconcile_suspect, reconcile_forget, reconcile_enqueue (pod_sweeper.enqueue and the hold), reconcile_prune
    and reconcile_finish, and its read of the attached table to ``recheck.generations``."""
    settings = settings_for(db_url, replica_id="contract")

    async def on_postgres() -> list[Any]:
        pool = db.make_pool(settings, max_size=2)
        await pool.open(wait=True, timeout=10)
        try:
            return await reconciling_scenario(PostgresReconciling(execs, pool, settings.cluster))
        finally:
            await pool.close()

    real = asyncio.run(on_postgres())
    held_to(real, asyncio.run(reconciling_scenario(MemoryReconciling())))
    # It reached what it meant to: a suspect due, one renamed, one held, one left to its row, one pruned.
    assert real[6][1] == ["h", "o", "r"] and real[8][1] == 1 and real[8][2]["r"] == ("reconciled", "pending")
    assert real[8][2]["o"] == ("retired", "pending") and real[9][1] == ["h:pod-h", "n:pod-n2"]
    assert real[11][1] == 1 and real[12][1] == [] and real[12][2] == 0


# The flushed case needs a streaming standby: a throwaway primary of the tests' binaries and an
# asynchronous standby of it built by pg_basebackup, as the failover tier builds them (two seconds).
STANDBY = "contract-dr"


class Flushing(Guarded, Protocol):
    def until_flushed(self) -> None: ...
    def disconnect(self) -> None: ...


class PostgresFlushing(PostgresGuarded):
    """The primary, and its standby ``STANDBY`` streaming (asynchronous)."""

    named = STANDBY

    def __init__(
        self, conn: psycopg.Connection[Any], store: OutboxStore, cluster: str, standby: ThrowawayCluster
    ) -> None:
        super().__init__(conn, store, cluster)
        self.standby = standby

    def until_flushed(self) -> None:
        """Until the standby has flushed everything written so far."""
        at = self.conn.execute("SELECT pg_current_wal_insert_lsn() AS at").fetchone()
        assert at is not None
        wait_until(
            lambda: self.conn.execute(
                "SELECT 1 FROM pg_stat_replication WHERE application_name = %s AND flush_lsn >= %s",
                (STANDBY, at["at"]),
            ).fetchone(),
            what="the standby's flush",
        )

    def disconnect(self) -> None:
        self.standby.stop("fast")
        wait_until(
            lambda: (
                not self.conn.execute(
                    "SELECT 1 FROM pg_stat_replication WHERE application_name = %s", (STANDBY,)
                ).fetchone()
            ),
            what="the standby gone from pg_stat_replication",
        )


class MemoryFlushing(MemoryGuarded):
    def __init__(self) -> None:
        super().__init__()
        self.memory.guard = [STANDBY]

    def until_flushed(self) -> None:
        replication = self.memory.replication
        replication.standbys = {STANDBY: replication.position}

    def disconnect(self) -> None:
        self.memory.replication.standbys = {}

    async def guard_reasons(self) -> dict[str, str]:
        by_id = {r.id: r.sandbox_id for r in self.memory.rows.values()}
        guards = [[STANDBY]] if self.fleet else []
        found = self.memory.row_reasons(guards=guards, fleet=self.fleet)
        return {by_id[row_id]: reason for row_id, reason in sorted(found.items())}


async def flushing_scenario(world: Flushing) -> list[Any]:
    """Marked rows claimed once the standby has flushed the marks; a retire after them held until it is
    marked and flushed; the standby gone, every claim held and every unclaimed row's reason the guard's."""
    seen: list[Any] = []
    await world.beat()
    world.retire("s0")
    world.retire("s1")
    seen.append(("unmarked rows are held", await guarded_claim(world, [STANDBY]), await world.guard_reasons()))
    seen.append(("marked", await world.mark()))
    world.until_flushed()
    seen.append(("flushed: claimed", await guarded_claim(world, [STANDBY]), await world.guard_reasons()))
    world.retire("s2")
    seen.append(("a later retire, unmarked, held", await guarded_claim(world, [STANDBY]), await world.guard_reasons()))
    seen.append(("marked", await world.mark()))
    world.until_flushed()
    seen.append(("flushed: due", await world.guard_reasons(), (await next_due(world) or 1.0) <= 0))
    world.disconnect()
    seen.append(("the standby gone: held", await world.guard_reasons(), await guarded_claim(world, [STANDBY])))
    seen.append(("looked at again in the recheck's interval", round(await next_due(world) or 0.0, 3)))
    return seen


def test_a_standbys_flush_releases_the_guards_claim_as_on_a_real_standby() -> None:
    """The memory store's guard with a standby's flush position, held to sql/guard_mark.sql, sql/claim.sql,
    sql/next_due.sql and sql/row_waits.sql on a primary with a real streaming standby: rows are claimed
    once it has flushed their marks, and held again once it is gone. (A standby connected but behind
    cannot be arranged at a chosen moment on PostgreSQL: the simulator's standbys fall behind by schedule.)"""
    with ThrowawayCluster(extra_settings={"synchronous_commit": "on"}) as primary:
        standby = primary.standby(name=STANDBY)
        try:
            url = primary.url()
            with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
                wait_until(
                    lambda: conn.execute(
                        "SELECT 1 FROM pg_stat_replication WHERE application_name = %s", (STANDBY,)
                    ).fetchone(),
                    timeout=30,
                    what="the standby streaming",
                )
                settings = settings_for(url, replica_id="contract")

                async def on_postgres() -> list[Any]:
                    async with db.connection(settings) as migrating:
                        await migrations.migrate(migrating)
                    create_executions(conn)
                    await attach_table(url)
                    async with outbox_stores(settings, "contract", guard=[STANDBY]) as (store,):
                        return await flushing_scenario(PostgresFlushing(conn, store, settings.cluster, standby))

                real = asyncio.run(on_postgres())
        finally:
            standby.cleanup()
    held_to(real, asyncio.run(flushing_scenario(MemoryFlushing())))
    assert real[0][1] == [] and real[2][1] == ["s0", "s1"] and real[3][1] == []
    assert real[5][1] == {"s0": "claimed", "s1": "claimed", "s2": "due"}
    assert real[6][1] == {"s0": "claimed", "s1": "claimed", "s2": "replication_guard"} and real[6][2] == []
    assert real[7][1] == 0.05
