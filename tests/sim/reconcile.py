"""The reconciliation pass in the simulator (a run that draws it: ``World.reconcile``).

Every replica runs the real ``tasks.loops.reconciler.Reconciler`` beside its sweeper, on the virtual clock
(its seams ``timer`` and ``rng``), with a short interval, quarantine and min-age so that a run holds many
passes. Its statements go to ``ReconcilePool``, whose connection answers each with the memory form of it
(``harness.memreconcile.MemoryReconcile``, held to sql/reconcile_*.sql and the pass's read of the attached
tables by tests/integration/test_store_contract.py), after a round trip of a few milliseconds each, and at the
seed's rate a read that fails before it applies. Its list requests and GETs go to ``ReconcileKube``, the
world's scripted API server: the credential hook, the outage, a 500 now and then, an expired ``continue``
token (410) now and then.

The world holds, in the namespace the pass lists (``NAMESPACE``), labelled pods of three kinds: orphans
(pods of retired generations, or of none, whose retire never reached the outbox: what the pass exists for),
live pods of active generations, and pods created during the run whose execution row is written (active) a
few seconds later, before the min-age, or never (a create that died: an orphan once old enough). A retired
generation may come back (active again), and the replicas' wall clocks are off and jump; the pod's age is
the database's to judge.

The invariants (tests/sim/invariants.py): ``the_reconciler_spares_the_young_and_the_active``, checked at
each suspect statement and each enqueue, and ``every_old_orphan_is_swept``, once the world has healed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from harness.memreconcile import MemoryReconcile, at
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.states import Outcome, Status
from pod_sweeper.kube.answer import Answer
from pod_sweeper.kube.errors import KubeError
from pod_sweeper.kube.interface import PodPage, PodState
from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep.quarantine import Sighting
from pod_sweeper.tasks.loops.reconciler import Reconciler
from sim import invariants as inv
from sim.credentials import NoCredential

if TYPE_CHECKING:
    from sim.world import Replica, World

# About one run in twelve draws the pass (a stream of its own: the runs that do not draw it run as before).
SHARE = 1 / 12
NAMESPACE = "sandboxes"  # the pass's namespace; the sweep's own rows are in world.NAMESPACES
SANDBOX_LABEL, GENERATION_LABEL = "sim.example/sandbox", "sim.example/generation"
INTERVAL = 3.0  # POD_SWEEPER_RECONCILE_INTERVAL: passes every three seconds or so, counted across replicas
QUARANTINE = 3.0  # POD_SWEEPER_RECONCILE_QUARANTINE
MIN_AGE = 10.0  # POD_SWEEPER_RECONCILE_MIN_AGE
PAGE_SIZE = 3  # POD_SWEEPER_RECONCILE_PAGE_SIZE: a listing of a few pages
SETTLE_LIMIT = 300.0  # virtual seconds the healed world's passes may take to sweep every old orphan
HORIZON = 40.0  # the script's (world.HORIZON)

STATEMENTS = {
    name: queries.load(name)
    for name in (
        "attachments",
        "reconcile_begin",
        "reconcile_suspect",
        "reconcile_forget",
        "reconcile_enqueue",
        "reconcile_prune",
        "reconcile_finish",
    )
}
# The one attached table, as sql/attachments.sql gives it.
ATTACHMENT = {
    "id": 1,
    "table_schema": "public",
    "table_name": "executions",
    "column_map": {c: c for c in ("sandbox_id", "generation", "pod_namespace", "pod_name", "pod_uid", "active")},
    "sandbox_id_type": "text",
    "generation_type": "bigint",
    "cluster": "default",
}


def settings_update() -> dict[str, Any]:
    return {
        "reconcile_sandbox_label": SANDBOX_LABEL,
        "reconcile_generation_label": GENERATION_LABEL,
        "reconcile_namespace": NAMESPACE,
        "reconcile_interval": INTERVAL,
        "reconcile_quarantine": QUARANTINE,
        "reconcile_min_age": MIN_AGE,
        "reconcile_page_size": PAGE_SIZE,
    }


@dataclass
class Labelled:
    """A pod carrying both labels: what the world made it as (the world's ``Pod`` keeps the rest)."""

    uid: str
    name: str
    sandbox: str
    generation: int
    created: float  # on the database's clock (the virtual time)
    kind: str  # orphan, live, young


class Reconciling:
    """The pass's part of one world: its pods, its rows in memory, its stream of choices and its checks."""

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world, self.rng = world, rng
        self.memory = MemoryReconcile(world.memory)
        self.pods: dict[str, Labelled] = {}  # uid -> the pod
        self.activated_at: dict[tuple[str, int], float] = {}  # key -> when it was first seen active
        self.got_at: dict[tuple[str, str], float] = {}  # (replica, uid) -> its pass's last GET of the pod
        self.started: dict[str, float] = {}  # replica -> its last pass's start, on the database's clock
        self._made = 0

    # --- the world's pods ----------------------------------------------------------------------------

    def _make(self, kind: str, created: float, *, row: bool | None) -> Labelled:
        """A labelled pod; ``row``: its execution row's ``active`` (None: no row)."""
        from sim.world import Pod  # the world imports this module

        world, rng = self.world, self.rng
        self._made += 1
        n = self._made
        uid = str(uuid.UUID(int=rng.getrandbits(128)))
        pod = Labelled(uid, f"rc-{n}", f"x{n}", rng.randint(1, 5), created, kind)
        self.pods[uid] = pod
        key = (pod.sandbox, pod.generation)
        if row is not None:
            self.memory.executions[key] = row
        world.pods[(NAMESPACE, pod.name)] = Pod(uid, pod.sandbox, pod.generation, active=False)
        if row:
            self._activate(pod)
        world.note(f"labelled pod {NAMESPACE}/{pod.name} {uid[:8]} {kind} row={row} created {created:.3f}")
        return pod

    def _activate(self, pod: Labelled) -> None:
        """Its generation has an active row (written at last, or back again): the claim's re-check sees it
        too (the memory store's ``activate``), and the world's pod is one never to delete."""
        world, key = self.world, (pod.sandbox, pod.generation)
        self.memory.executions[key] = True
        world.memory.activate(*key)
        self.activated_at.setdefault(key, world.loop.time())
        live = world.pods.get((NAMESPACE, pod.name))
        if live is not None and live.uid == pod.uid:
            live.active = True

    def retired(self, key: tuple[str, int]) -> None:
        """The generation is retired again (``World._reopen``, a run with the replication guard too): its
        execution row, if the pass's table has one, is inactive, and it is active no more from now."""
        if key in self.memory.executions:
            self.memory.executions[key] = False
        self.activated_at.pop(key, None)

    def populate(self) -> None:
        """The pods the run starts with: old orphans (retired, or no row), live pods, a young one or two."""
        rng, now = self.rng, self.world.loop.time()
        for _ in range(rng.randint(2, 6)):
            self._make("orphan", now - rng.uniform(MIN_AGE + 1.0, 3600.0), row=False if rng.random() < 0.5 else None)
        for _ in range(rng.randint(1, 4)):
            self._make("live", now - rng.uniform(0.0, 3600.0), row=True)
        for _ in range(rng.choice((0, 1, 2))):
            self._young()

    def _young(self) -> None:
        """A pod just created, its execution row not written yet: written (active) a few seconds later, well
        before the min-age, or never (its create died: an orphan of no row once old enough)."""
        world, rng = self.world, self.rng
        pod = self._make("young", world.loop.time(), row=None)
        if rng.random() < 0.7:
            world.loop.call_later(rng.uniform(0.5, MIN_AGE - 2.0), self._written, pod)

    def _written(self, pod: Labelled) -> None:
        self._activate(pod)
        self.world.note(f"execution row of {NAMESPACE}/{pod.name} written, active")

    def _back(self) -> None:
        """A retired generation comes back: an orphan's row active again, before any claim of a row the
        pass enqueued for it (as ``World._activate``: a generation active again after its claim's re-check is
        a window the design leaves open, the re-check being at claim time)."""
        rows = {str(r.pod_uid): r for r in self.world.memory.rows.values()}
        orphans = [
            p
            for p in self.pods.values()
            if p.kind == "orphan"
            and ((row := rows.get(p.uid)) is None or (row.status is Status.PENDING and row.claim_epoch == 0))
        ]
        if orphans:
            pod = self.rng.choice(orphans)
            self._activate(pod)
            self.world.note(f"generation of {NAMESPACE}/{pod.name} active again")

    def _jump(self) -> None:
        """A live replica's wall clock steps (the database's does not)."""
        live = [r for r in self.world.replicas if r.alive]
        if live:
            replica = self.rng.choice(live)
            by = self.rng.choice((-1.0, 1.0)) * self.rng.uniform(5.0, 600.0)
            replica.skew += by
            self.world.note(f"{replica.name} wall clock jumps {by:+.3f} s")

    def script(self, events: list[tuple[float, int, Callable[[], None]]]) -> None:
        rng = self.rng
        for _ in range(rng.randint(2, 8)):
            events.append((rng.uniform(0.0, HORIZON), len(events), self._young))
        for _ in range(rng.choice((0, 1, 2))):
            events.append((rng.uniform(0.0, HORIZON), len(events), self._back))
        for _ in range(rng.choice((0, 1, 2, 3))):
            events.append((rng.uniform(0.0, HORIZON), len(events), self._jump))

    def start(self, replica: Replica, metrics: Metrics) -> Reconciler:
        """The replica's reconciler, as the runner builds it, on the world's clock; its host's wall clock
        drawn off by up to two minutes either way (or right)."""
        world, rng = self.world, self.rng
        replica.skew = rng.choice((0.0, 0.0, 1.0, -1.0)) * rng.uniform(5.0, 120.0)
        settings = world.settings.model_copy(update={"replica_id": replica.name})
        pool = cast(AsyncConnectionPool[Connection], ReconcilePool(self, replica))
        kube = ReconcileKube(self, replica)
        jitter = random.Random(rng.getrandbits(64))
        return Reconciler(settings, pool, kube, metrics, replica.outage, timer=world.loop.time, rng=jitter)

    # --- the checks ----------------------------------------------------------------------------------

    def note_activations(self) -> None:
        """A generation the script's activations (``World._activate``) made active is seen at a statement:
        its time as seen is no earlier than the truth, so a check against it never blames the pass wrongly."""
        now = self.world.loop.time()
        for key in self.world.memory._active:
            self.activated_at.setdefault(key, now)

    def _spared(self, replica: Replica, uid: str, what: str) -> str | None:
        """Why the pass should have spared the pod (``the_reconciler_spares_the_young_and_the_active``)."""
        pod = self.pods.get(uid)
        if pod is None:
            return f"{what} pod {uid[:8]}, not a labelled pod of the namespace"
        now = self.world.loop.time()
        if now - pod.created < MIN_AGE:
            return f"{what} {pod.name}, {now - pod.created:.3f} s old on the database's clock"
        since = self.activated_at.get((pod.sandbox, pod.generation))
        started = self.started.get(replica.name, -1.0)
        if since is not None and since <= started:
            return f"{what} {pod.name}, its generation active since {since:.3f}, before the pass began at {started:.3f}"
        return None

    def check_sighting(self, replica: Replica, sightings: list[Sighting]) -> None:
        for sighting in sightings:
            if (why := self._spared(replica, sighting.pod_uid, f"{replica.name} made a suspect of")) is not None:
                self.world.broke(inv.RECONCILE_SPARES, why)

    def check_enqueue(self, replica: Replica, uids: list[str]) -> None:
        memory, world = self.memory, self.world
        rows = {str(r.pod_uid): r for r in world.memory.rows.values()}
        for uid in uids:
            if uid not in memory.suspects or f"uid:{uid}" in world.memory._kept:
                continue
            row = rows.get(uid)
            if row is not None and not (row.status is Status.DONE and row.outcome is Outcome.SKIPPED_ACTIVE):
                continue  # left to its row
            what = f"{replica.name} enqueued"
            if (why := self._spared(replica, uid, what)) is not None:
                world.broke(inv.RECONCILE_SPARES, why)
                continue
            pod = self.pods[uid]
            got = self.got_at.get((replica.name, uid))
            since = self.activated_at.get((pod.sandbox, pod.generation))
            if got is None or got < self.started.get(replica.name, 0.0):
                world.broke(inv.RECONCILE_SPARES, f"{what} {pod.name} with no fresh GET of it in its pass")
            elif since is not None and since <= got:
                world.broke(
                    inv.RECONCILE_SPARES,
                    f"{what} {pod.name}, its generation active since {since:.3f}, before the GET at {got:.3f}",
                )

    def unswept(self, *, young: bool = False) -> list[str]:
        """``every_old_orphan_is_swept``: the labelled pods older than the min-age (or any age: ``young``),
        of a generation with no active row, still there (not terminating) with no row of the outbox that
        keeps them."""
        world, found = self.world, []
        now = world.loop.time()
        rows = {str(r.pod_uid): r for r in world.memory.rows.values()}
        for pod in self.pods.values():
            live = world._pod(NAMESPACE, pod.name)
            if live is None or live.uid != pod.uid or live.gone_at is not None or live.active:
                continue
            if (now - pod.created < MIN_AGE and not young) or self.memory.active((pod.sandbox, pod.generation)):
                continue
            row = rows.get(pod.uid)
            if row is None or row.status in (Status.PENDING, Status.CLAIMED):
                found.append(f"{pod.name} ({pod.kind}, {now - pod.created:.3f} s old), row {row and row.id}")
        return found

    async def settle(self) -> None:
        """The healed world's passes sweep every old orphan (up to ``SETTLE_LIMIT``), and the sweep ends the
        rows they enqueue; a pod too young yet is waited for until it is old enough to be swept."""
        world = self.world
        for _ in range(int(SETTLE_LIMIT)):
            open_rows = any(r.status in (Status.PENDING, Status.CLAIMED) for r in world.memory.rows.values())
            if not open_rows and not self.unswept(young=True):
                return
            world._reset_breaker()
            await asyncio.sleep(1.0)
        if left := self.unswept():
            world.broke(inv.ORPHANS_SWEPT, f"{SETTLE_LIMIT:.0f} s after healing: {left[0]}")


class _Rows:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    async def fetchone(self) -> dict[str, Any] | None:
        return self.rows[0] if self.rows else None

    async def fetchall(self) -> list[dict[str, Any]]:
        return self.rows


class ReconcilePool:
    """One replica's reconciler's pool: one connection whose statements are ``MemoryReconcile``'s, each
    applied whole after a round trip of a few milliseconds (its answer back at once: a simulated step less
    each); a read (the lease's take, the attachments, the tables' lookup, each its transaction's first
    statement) fails before it applies at the seed's rate."""

    def __init__(self, reconciling: Reconciling, replica: Replica) -> None:
        self.reconciling, self.replica = reconciling, replica
        self.world = reconciling.world

    def connection(self) -> AbstractAsyncContextManager[Connection]:
        return self._connection()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        yield cast(Connection, self)

    def transaction(self) -> AbstractAsyncContextManager[object]:
        return self._transaction()

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[object]:
        yield None

    async def _trip(self) -> None:
        await asyncio.sleep(self.reconciling.rng.uniform(0.0, 0.004))

    async def execute(self, query: sql.Composable, params: Any = None) -> _Rows:
        world, rec, name = self.world, self.reconciling, self.replica.name
        memory = rec.memory
        await self._trip()
        reads = (STATEMENTS["reconcile_begin"], STATEMENTS["attachments"])
        read = isinstance(query, sql.Composed) or query in reads
        if read and not world.healed and rec.rng.random() < world.faults.db_fail:
            raise psycopg.OperationalError("connection lost (scripted)")
        rec.note_activations()
        rows: list[dict[str, Any]] = []
        if isinstance(query, sql.Composed):  # store.sweep.recheck's lookup of the one attached table
            indexes, sandboxes, generations = params
            found = memory.generation_rows(list(zip(sandboxes, generations, strict=True)))
            rows = [{"i": indexes[j], "active": active} for j, active in found.items()]
        elif query == STATEMENTS["attachments"]:
            rows = [ATTACHMENT]
        elif query == STATEMENTS["reconcile_begin"]:
            started = memory.begin(replica=name, gap=params["gap"], lease=params["lease"])
            if started is not None:
                rec.started[name] = started.timestamp()
                rows = [{"started_at": started}]
                world.note(f"{name} reconcile pass begins")
        elif query == STATEMENTS["reconcile_suspect"]:
            sightings = [
                Sighting(*fields)
                for fields in zip(
                    params["uids"],
                    params["namespaces"],
                    params["names"],
                    params["sandbox_ids"],
                    params["generations"],
                    params["attachment_ids"],
                    params["whys"],
                    strict=True,
                )
            ]
            rec.check_sighting(self.replica, sightings)
            due = memory.sight(sightings, started_at=params["started_at"], quarantine=params["quarantine"])
            rows = [{"pod_uid": s.pod_uid, "due": s.pod_uid in due} for s in sightings]
            world.note(f"{name} suspects {' '.join(s.pod_name for s in sightings)} due {len(due)}")
        elif query == STATEMENTS["reconcile_forget"]:
            memory.forget(list(params["uids"]))
        elif query == STATEMENTS["reconcile_enqueue"]:
            uids = list(params["uids"])
            rec.check_enqueue(self.replica, uids)
            enqueued = memory.enqueue(uids)
            rows = [{"enqueued": enqueued}]
            world.note(f"{name} reconcile enqueued {enqueued} of {len(uids)}")
        elif query == STATEMENTS["reconcile_prune"]:
            memory.prune(started_at=params["started_at"])
        elif query == STATEMENTS["reconcile_finish"]:
            left = memory.finish(
                replica=name,
                started_at=params["started_at"],
                seen=params["seen"],
                enqueued=params["enqueued"],
                error=params["error"],
            )
            rows = [] if left is None else [{"last_suspects": left}]
        else:
            raise AssertionError(f"the simulator's reconciler knows no statement {query!r:.80}")
        return _Rows(rows)


class ReconcileKube:
    """One replica's reconciler's ``PodKube``: its lists and GETs go to the world's scripted API server."""

    def __init__(self, reconciling: Reconciling, replica: Replica) -> None:
        self.reconciling, self.replica = reconciling, replica
        self.world = reconciling.world

    def _look(self, what: str) -> None:
        world, rng = self.world, self.reconciling.rng
        try:
            expired = world._credential(self.replica, what)
        except NoCredential as failed:  # the credential hook raised: never on the wire
            raise KubeError(Answer.unsent(failed.cause)) from failed
        world.loop.charge(rng.uniform(0.001, 0.02))
        if world.down:
            raise KubeError(Answer.none("down (scripted)", kind="ConnectionRefusedError"))
        if expired:
            raise KubeError(Answer.of(401, "Unauthorized", "expired token (scripted)"))
        if not world.healed and rng.random() < 0.05:
            raise KubeError(Answer.of(500, "InternalError", "scripted 500"))
        world.seq += 1
        world.answered_seq = world.seq

    def _state(self, pod: Labelled) -> PodState | None:
        live = self.world._pod(NAMESPACE, pod.name)
        if live is None or live.uid != pod.uid:
            return None
        labels = {SANDBOX_LABEL: pod.sandbox, GENERATION_LABEL: str(pod.generation)}
        return PodState(pod.uid, live.node, NAMESPACE, pod.name, labels, at(pod.created), live.gone_at is not None)

    def list_pods(
        self, namespace: str, label_selector: str, *, limit: int, continue_token: str | None, timeout: float
    ) -> PodPage:
        self._look(f"LIST {namespace} from {continue_token or 'the start'}")
        rng = self.reconciling.rng
        if continue_token and not self.world.healed and rng.random() < 0.1:
            raise KubeError(Answer.of(410, "Gone", "the continue token expired (scripted)"))
        assert namespace == NAMESPACE and label_selector == f"{SANDBOX_LABEL},{GENERATION_LABEL}"
        listed = sorted(
            (state for pod in self.reconciling.pods.values() if (state := self._state(pod)) is not None),
            key=lambda s: s.name,
        )
        start = int(continue_token or 0)
        following = start + limit < len(listed)
        return PodPage(listed[start : start + limit], str(start + limit) if following else None)

    def pod_state(self, namespace: str, name: str, *, timeout: float) -> PodState | None:
        self._look(f"GET {namespace}/{name}")
        pod = next((p for p in self.reconciling.pods.values() if p.name == name), None)
        state = None if pod is None else self._state(pod)
        if state is not None:
            self.reconciling.got_at[(self.replica.name, state.uid)] = self.world.loop.time()
        return state

    def node_exists(self, name: str, *, timeout: float) -> bool:
        raise AssertionError("the reconciler looks up no node")

    def force_delete(self, namespace: str, name: str, uid: str, *, timeout: float) -> Answer:
        raise AssertionError("the reconciler deletes nothing")

    def wall_now(self) -> datetime:
        """The replica's host's ``datetime.now(UTC)``: the virtual time and its skew. Nothing in the daemon
        reads it; the mutant ``reconcile_age_by_the_wall_clock`` does."""
        return datetime.fromtimestamp(self.world.loop.time() + self.replica.skew, UTC)
