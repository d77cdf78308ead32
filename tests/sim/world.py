"""One simulated run: N replicas of the daemon's own sweep over one memory outbox and a scripted
Kubernetes, on ``SimLoop``, every choice drawn from one seed.

What runs is the daemon's code: each replica is a real ``tasks.sweep.sweeper.Sweeper`` (its claimer,
``concurrency`` workers, recorder, and its ``drain`` at a stop) beside a real ``tasks.loops.outage.
OutageWatch``, built as the runner builds them, with the seams the daemon offers for a clock, a timer and
the jitter. What stands in: the database is ``harness.memstore.MemoryStore`` (held row for row to
PostgreSQL by tests/integration/test_store_contract.py), one view per replica, behind ``SimStore``,
which adds a round trip to every statement and the faults; the API server is ``Cluster``, which keeps
the pods and answers each DELETE as the real one does (the UID precondition, a 409's GET) unless the
seed draws a fault. The outage watch's database row is the memory store's (tests/sim/outage.py). In a run with the
breaker's surge rule on (``World.surge``), each replica runs the real ``tasks.loops.surge.SurgeWatch`` too,
its statements the memory store's (``SurgePool``). In a run with the reconciliation pass
(``World.reconcile``), each replica runs the real ``tasks.loops.reconciler.Reconciler`` too, over labelled
pods of one namespace (tests/sim/reconcile.py). The breaker's row is
the world's (its reason, its lock held for a claim's transaction, its reset), read through the memory
store's window (see ``BREAKER_AS_SQL``).

The seed draws the world (replicas, rows, namespaces, the fault rates) and then every choice in it:
which ready callback runs next, each round trip's latency, each answer, and the script of events (a
retire arriving, a replacement pod, a generation active again, a hold or a pause, an API outage, a
breaker reset, a replica killed at a step or stopped with its deadline). After the script the world heals (no more
faults, a fresh replica), runs until every row has ended, stops every replica and checks the end.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import functools
import gc
import hashlib
import math
import os
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from harness.clock import FakeClock
from harness.memstore import MemorySession, MemoryStore, Row
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.core.states import Outcome, Result, Status
from pod_sweeper.core.waits import DUE, ROW_ORDER, UNSWEPT_AFTER_SECONDS, Wait
from pod_sweeper.kube.answer import Answer
from pod_sweeper.kube.errors import KubeError
from pod_sweeper.kube.interface import PodEvent, PodPage, PodState
from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection
from pod_sweeper.store.interface import StoreError
from pod_sweeper.store.rows import Arming, AtClaim, BreakerWindow, ClaimedBatch, Terminating, Verdict
from pod_sweeper.tasks.loops.confirmer import Confirmer
from pod_sweeper.tasks.loops.outage import OutageWatch
from pod_sweeper.tasks.loops.surge import SurgeWatch
from pod_sweeper.tasks.rules.gates import BreakerGate
from pod_sweeper.tasks.rules.surge import SURGE_INTERVAL, SURGE_WINDOW
from pod_sweeper.tasks.sweep.sweeper import Sweeper
from sim import invariants as inv
from sim import reconcile
from sim.credentials import Credentials, NoCredential, draw_provider
from sim.guard import Standbys, check_send
from sim.guard import draw as draw_guard
from sim.invariants import Broken, Violation
from sim.large import FIRST_ID as LARGE_FIRST_ID
from sim.large import draw as draw_large
from sim.loop import SimLoop
from sim.outage import OutagePool, Reports
from sim.surge_db import SurgeDatabase

T = TypeVar("T")

NAMESPACES = ("team-a", "team-b")
# The answers the seed may draw for a DELETE besides the real one, each (kind, weight).
ANSWER_KINDS = ("real", "429", "500", "503", "410", "401", "403", "none", "none_applied", "slow")
# sql/breaker_window.sql counted every claimed row as a delete that may still happen, an expired lease's
# too; rows left claimed by a crash or a lost commit, as many as the ceiling, then held the breaker
# tripped for ever: their leases can be taken over only by a claim, which the budget no longer allows,
# and a reset tripped it again at the next claim (issue 53's simulator found it; SIM_BREAKER_AS_SQL=1
# python -m tests.sim --seed 38 replays that count). Counting only the leases still running is no fix:
# a replica whose lease ran out behind a stall still holds its rows and records their deletes late, past
# the ceiling (the simulator showed it). The statement now counts the claims that may still end in a
# delete, a lease still running or a row a live replica may still hold (live by its heartbeat,
# pod_sweeper.replicas; tests/integration/test_breaker.py holds it on PostgreSQL), and so does the
# simulator, from the replicas alive in its world; the memory store alone still counts every claimed row.
BREAKER_AS_SQL = os.environ.get("SIM_BREAKER_AS_SQL") == "1"
HORIZON = 40.0  # virtual seconds of scripted events; then the world heals
SETTLE_LIMIT = 900.0  # virtual seconds the healed world may take to end every row
# POD_SWEEPER_STUCK_TERMINATING_SECONDS in the simulator: past the grace periods drawn (up to 5 s, and the
# confirmer's margin of 5 s), short of the pods that linger (20 s) or never end (their node gone).
STUCK_SECONDS = 12.0
CONFIRM_LIMIT = 300.0  # virtual seconds the healed world's confirmers may take to settle every terminating pod
NODES = ("node-a", "node-b")
# The surge rule in the runs that draw it (``World.surge``): POD_SWEEPER_BREAKER_SURGE_FACTOR and a floor
# low enough that a burst of a few dozen retires trips it (more than 12 within the watch's two seconds),
# high enough that the rows a run starts with (10 at most, at once) do not.
SURGE_FACTOR = 4.0
SURGE_FLOOR = 6.0
# How long past the watch's interval a surge the rule trips on may go untripped: the watch's round trips.
SURGE_SLACK = 0.1


def base_settings() -> Settings:
    """The replicas' settings: poll-only, no breaker or Events, short leases and backoffs so a run's
    minute holds many leases, retries and stops."""
    return Settings(
        database_url="postgresql://nobody@nowhere.invalid/none",
        http_port=0,
        max_deletes_per_minute=0,
        breaker_surge_factor=0,
        breaker_transaction_rows=0,
        events=False,
        listen=False,
        poll_interval=2.0,
        lease_seconds=6.0,
        request_timeout=2.0,
        backoff_base=0.2,
        backoff_max=3.0,
        rate_limit_qps=0,
        max_attempts=1000,
        concurrency=2,
        batch_size=4,
        shutdown_timeout=3.0,
        stuck_terminating_seconds=STUCK_SECONDS,
        force_stuck=True,
    )


_BASE = base_settings()
# One set of metrics for every replica of every run in a process: nothing the sweep decides reads them
# back, and a registry a replica costs a tenth of a run.
_METRICS = Metrics()


@dataclass(frozen=True)
class Faults:
    """What the seed drew for a run: how often each thing goes wrong."""

    answers: tuple[float, ...]  # weights, in ANSWER_KINDS order
    db_fail: float  # a statement fails before it applies (a connection lost)
    commit_lost: float  # a transaction committed, and its answer never arrived
    db_stall: float  # a statement takes seconds (a frozen connection; leases run out behind it)
    kills: int
    stops: int
    replacements: int
    activations: int
    keeps: int
    outage: bool
    arrivals: int
    breaker: int  # POD_SWEEPER_MAX_DELETES_PER_MINUTE (0: the breaker off)


def draw_faults(rng: random.Random) -> Faults:
    calm = rng.random() < 0.2
    answers = tuple([8.0] + [0.0 if calm else rng.choice((0.0, 0.3, 1.0)) for _ in ANSWER_KINDS[1:]])
    return Faults(
        answers=answers,
        db_fail=0.0 if calm else rng.choice((0.0, 0.02, 0.1)),
        commit_lost=0.0 if calm else rng.choice((0.0, 0.02, 0.1)),
        db_stall=0.0 if calm else rng.choice((0.0, 0.01, 0.05)),
        kills=rng.choice((0, 0, 1, 2)),
        stops=rng.choice((0, 1, 1, 2)),
        replacements=rng.choice((0, 1, 2, 3)),
        activations=rng.choice((0, 1, 2)),
        keeps=rng.choice((0, 1, 2)),
        outage=rng.random() < 0.25,
        arrivals=rng.choice((0, 2, 5)),
        breaker=rng.choice((0, 0, 0, 2, 4, 8)),
    )


@dataclass
class Pod:
    uid: str
    sandbox: str
    generation: int
    active: bool  # its generation is active: it must never be deleted
    # Drawn only in a run with terminating pods (``World.terminating``): a DELETE leaves the pod
    # terminating for ``grace`` seconds and ``linger`` more (a slow kubelet; inf: it never ends by itself,
    # as on a node that is gone), on ``node``; ``gone_at``, once it was deleted.
    grace: int = 0
    linger: float = 0.0
    node: str = NODES[0]
    gone_at: float | None = None


@dataclass(frozen=True)
class Request:
    at: float
    replica: str
    namespace: str
    name: str
    uid: str
    answer: str
    seq: int  # ordered against the claims (World.seq)
    left: int  # when it went on the wire, after the client's credential hook (World.seq)
    down: bool  # sent while the API server was down (an outage of the script's)


class _LoopClock(FakeClock):
    """The memory store's clock: the loop's virtual time (``advance`` is the loop's, not a test's)."""

    def __init__(self, loop: SimLoop) -> None:
        super().__init__(loop.time())
        self._loop = loop

    def __call__(self) -> float:
        return self._loop.time()


class _NoPool:
    """The confirmer's pool, which it never uses: its statements go through its ``rows`` seam (``SimRows``)."""

    def connection(self) -> AbstractAsyncContextManager[Connection]:
        return self._refused()

    @contextlib.asynccontextmanager
    async def _refused(self) -> AsyncIterator[Connection]:
        raise psycopg.OperationalError("no database in the simulator")
        yield  # an async generator all the same


class World:
    def __init__(self, seed: int, *, replicas: int | None = None, forced: list[int] | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.loop = SimLoop(random.Random(self.rng.getrandbits(64)), forced=forced)
        self.faults = draw_faults(self.rng)
        # Faults added later draw from a stream of their own, so that every seed drawn before them that
        # draws none of them runs as it did (the mutants' first seeds, a replay command kept in a note).
        self.later = random.Random(f"{seed}:later faults")
        self.discards = self.later.choice((0, 0, 1, 2))  # the on-call's `pod-sweeper discard` of a row
        # Pods that terminate with a grace period, the confirmer that looks at them again, the replicas'
        # wall clocks jumping and a node gone: a stream of their own, drawn in some runs only (the runs
        # that draw none run as before them).
        self.slow = random.Random(f"{seed}:terminating")
        self.terminating = self.slow.random() < 0.3
        self.nodes_gone: set[str] = set()
        # The breaker's surge rule on, the replicas' surge watches and bursts of retires that may trip it:
        # a stream of its own again, drawn in some runs only (the runs that draw none run as before it).
        self.surging = random.Random(f"{seed}:surge")
        self.surge = self.surging.random() < 0.06
        self.surge_db = SurgeDatabase(seed)  # the surge watch's statements failing (tests/sim/surge_db.py)
        self.memory = MemoryStore(_LoopClock(self.loop), replica="nobody")
        self.reports = Reports(self.note)  # the outage watches' rows (tests/sim/outage.py)
        # The reconciliation pass on every replica, over orphans, live and young labelled pods
        # (tests/sim/reconcile.py): a stream of its own again, drawn in some runs only.
        reconciling = random.Random(f"{seed}:reconcile")
        drawn = reconciling.random() < reconcile.SHARE
        self.reconcile = reconcile.Reconciling(self, reconciling) if drawn else None
        update: dict[str, Any] = {"max_deletes_per_minute": self.faults.breaker}
        if self.surge:
            update |= {"breaker_surge_factor": SURGE_FACTOR, "breaker_surge_floor": SURGE_FLOOR}
        # The replication guard on, with standbys that fall behind or disconnect (tests/sim/guard.py): a
        # stream of its own once more, drawn in some runs only (the runs that draw none run as before it).
        self.guard = draw_guard(seed, self.loop.time(), HORIZON)
        if self.guard is not None:
            self.memory.replication.standbys = Standbys(self.guard, self.memory.replication, self.loop)
            update["replication_guard"] = frozenset(self.guard.names)
        if self.reconcile is not None:
            update |= reconcile.settings_update()
        # The identity provider behind the replicas' credential hooks down at times, a renewal begun then
        # failing (tests/sim/credentials.py): a stream of its own again, drawn in some runs only.
        self.provider = draw_provider(seed, self.loop.time(), HORIZON)
        # The breaker's transaction rule with a small threshold, and host transactions of that many rows or
        # about (tests/sim/large.py): a stream of its own again, drawn in some runs only.
        self.large = draw_large(seed, HORIZON)
        if self.large is not None:
            update["breaker_transaction_rows"] = self.large.rows
        self.settings = _BASE.model_copy(update=update)
        # The cluster's breaker row: its reason, the lock a claim holds it by, when it was last reset,
        # and the send time of each delete recorded (the bound's count).
        self.tripped: str | None = None
        self.breaker_lock = asyncio.Lock()
        self.resumed_at = float("-inf")
        self.recorded_deletes: list[float] = []
        self.trips = 0  # times the breaker tripped (a claim that read it tripped names the trip it read)
        self._surging_since: dict[str, float] = {}  # replica -> since when its watch's rule says trip
        self._surge_checked: tuple[float, int] = (0.0, 0)
        self.pods: dict[tuple[str, str], Pod] = {}
        self.requests: list[Request] = []
        self.issued: dict[str, float] = {}  # every credential token issued -> when it expires
        self.trace: list[str] = []
        self.violation: Violation | None = None
        self.down = False  # the API server answers nothing (an outage)
        self.healed = False
        self.seq = 0  # orders claims against holds and pauses within one virtual instant
        self.claimed_at: dict[tuple[int, int], tuple[str, int]] = {}  # (row, epoch) -> (replica, seq)
        self.kept_since: dict[str, int] = {}  # "uid:..."/"ns:..." -> seq the hold or pause began
        self.done: dict[int, int] = {}  # row -> times it became done
        self.answered_seq = 0  # the last request or probe the API server answered
        self.replicas: list[Replica] = []
        self.n_replicas = replicas if replicas is not None else self.rng.choice((1, 2, 2, 3))
        self._names = 0
        self._kill_steps: list[int] = []  # steps at which a replica is killed, soonest first
        self._reasons_checked: tuple[float, int] = (0.0, 0)  # when the rows' reasons were last checked
        self.loop.on_step = self._after_step

    # --- the record and the checks ------------------------------------------------------------------

    def note(self, text: str) -> None:
        self.trace.append(f"{self.loop.time():.6f} {text}")

    def broke(self, name: str, detail: str) -> None:
        if self.violation is None:
            self.violation = Violation(name, self.loop.time(), self.loop.steps, detail)
            self.note(f"BROKEN {name}: {detail}")

    def count_delete(self, sent_at: float) -> None:
        """A delete recorded: no more than the ceiling sent within any minute since the last reset."""
        self.recorded_deletes.append(sent_at)
        limit = self.faults.breaker
        since = [t for t in self.recorded_deletes if t > self.resumed_at]
        since.sort()
        for i in range(len(since) - limit):
            if since[i + limit] - since[i] < 60.0:
                self.broke(inv.BREAKER_BOUND, f"{limit + 1} deletes sent within a minute: {since[i : i + limit + 1]}")
                return

    def _check_reasons(self) -> None:
        """``a_waiting_rows_reason_agrees_with_its_state``: each open row's reason, as ``explain`` and
        ``status`` would give it (sql/row_waits.sql, whose memory form the store contract test holds to
        it), is the first in ``core.waits.ROW_ORDER`` of what the world knows keeps the row: a claim whose
        lease runs, a hold or a pause the on-call put in force, the breaker tripped, the replication guard,
        an outage report of a replica's probed within 2 minutes; else a backoff by
        the row's last answer while it is not due, or nothing while it is."""
        now, tripped = self.loop.time(), self.tripped is not None
        # A row's reason changes only with time or with what the trace records (a statement that wrote,
        # an on-call's act, the breaker): a step that moved neither is not checked again.
        moment = (now, len(self.trace))
        if moment == self._reasons_checked:
            return
        self._reasons_checked = moment
        guard, unreachable = self.guard, self.reports.unreachable(now)
        guards = [guard.names] if guard is not None else []
        for row_id, reason in self.memory.row_reasons(tripped=tripped, guards=guards).items():
            row = self.memory.rows[row_id]
            waiting = row.next_attempt_at > now
            truth = {
                Wait.CLAIMED: row.status is Status.CLAIMED and waiting,
                Wait.HELD: bool(self.kept_since) and f"uid:{row.pod_uid}" in self.kept_since,
                Wait.PAUSED: bool(self.kept_since) and f"ns:{row.pod_namespace}" in self.kept_since,
                # a large host transaction a claim kept back, which the on-call has not ended (sim/large.py)
                Wait.LARGE_TRANSACTION: self.large is not None and row.transaction in self.large.kept,
                Wait.BREAKER: tripped,
                # the guard: the row's mark vouches for no enqueue of it, or a standby the replicas' guard
                # names is not connected or has not flushed the mark (the world's standbys, sim/guard.py)
                Wait.REPLICATION_GUARD: guard is not None and guard.keeps_back(row, self.memory.replication, now),
                # a replica's outage report probed within 2 minutes, on the database's clock (sim/outage.py)
                Wait.KUBE_UNREACHABLE: unreachable,
            }
            expected = next((wait.value for wait in ROW_ORDER if truth.get(wait)), None)
            if expected is None:
                after = {401: Wait.KUBE_UNAUTHORIZED, 403: Wait.NAMESPACE_REFUSED}.get(row.last_http_status or 0)
                expected = (after or Wait.BACKOFF).value if waiting else DUE
                if not waiting and now - row.next_attempt_at >= UNSWEPT_AFTER_SECONDS:
                    expected = Wait.UNSWEPT.value
            if reason != expected:
                self.broke(
                    inv.REASON_AGREES,
                    f"row {row_id} ({row.status}, due in {row.next_attempt_at - now:.3f} s) waits [{reason}], "
                    f"the world says [{expected}]",
                )
                return

    def trip(self, replica: Replica, reason: str, by: str) -> None:
        """The breaker's row tripped (sql/breaker_trip.sql keeps the first reason; the claimer's trip
        writes its own over it, which no check reads)."""
        if self.tripped is None:
            self.trips += 1
        if by == "the claim" or self.tripped is None:
            self.tripped = reason
        self.note(f"{replica.name} trips the breaker" if by == "the claim" else f"{replica.name}'s {by} trips it")

    def _check_surge(self) -> None:
        """``a_surge_trips_the_breaker``: while the host's retires the surge watch counts (sql/
        breaker_arrivals.sql in its memory form, held to it by the store contract test) come faster than
        the surge rule's threshold by a live replica's watch's recent rate, the breaker is tripped within
        the watch's interval (and its round trips), counted from that watch's last failed statement when it
        is later than the surge's start (tests/sim/surge_db.py). The count falls only with time between the steps that
        add or keep rows, so a rule that holds at two steps held between them."""
        now = self.loop.time()
        moment = (now, len(self.trace))
        if moment == self._surge_checked:
            return
        self._surge_checked = moment
        if self.tripped is not None:
            self._surging_since.clear()
            return
        arrived = self.memory.arrivals(
            window=SURGE_WINDOW, reset_at=self.resumed_at, transaction_rows=self.settings.breaker_transaction_rows
        )
        rate = arrived / SURGE_WINDOW
        for replica in self.replicas:
            watch = replica.surge_watch
            if not replica.alive or watch is None or watch.baseline is None:
                self._surging_since.pop(replica.name, None)
                continue
            threshold = watch.rules.threshold(watch.baseline.rate)
            if rate <= threshold:
                self._surging_since.pop(replica.name, None)
                continue
            since = self._surging_since.setdefault(replica.name, now)
            # a look the watch's database failed judged nothing: counted from its last failure at the earliest
            since = max(since, self.surge_db.counts_from(replica.name))
            if now - since > SURGE_INTERVAL + SURGE_SLACK:
                self.broke(
                    inv.SURGE_TRIPS,
                    f"{arrived} retires in {SURGE_WINDOW:g} s ({rate:.1f}/s) over {replica.name}'s "
                    f"threshold {threshold:.1f}/s since {since:.3f}, the breaker not tripped",
                )
                return

    def _after_step(self) -> None:
        self._check_reasons()
        if self.surge:
            self._check_surge()
        for replica in self.replicas:
            if replica.alive:
                replica.check_hand()
        if self._kill_steps and self.loop.steps >= self._kill_steps[0]:
            self._kill_steps.pop(0)
            self._kill_now()
        if self.violation is not None:
            raise Broken(self.seed, self.violation)

    def digest(self) -> str:
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()

    def row_of_uid(self, uid: str) -> Row | None:
        for row in self.memory.rows.values():
            if str(row.pod_uid) == uid:
                return row
        return None

    def kept_before_claim(self, row: Row) -> str | None:
        """The hold or pause that began before the row's current claim and still holds, if any."""
        claim = self.claimed_at.get((row.id, row.claim_epoch))
        for key in (f"uid:{row.pod_uid}", f"ns:{row.pod_namespace}"):
            since = self.kept_since.get(key)
            if since is not None and (claim is None or since < claim[1]):
                return key
        return None

    # --- the scripted API server ----------------------------------------------------------------------

    def _credential(self, replica: Replica, what: str) -> bool:
        """The replica's credential hook, run as the client runs it before a request; whether the token
        it sends has expired (the server answers 401 then). ``NoCredential`` when the hook raised (the
        identity provider down): nothing goes on the wire."""
        try:
            token, alone, began = replica.credentials.request()
        except NoCredential as failed:
            self.note(f"{replica.name} {what} not sent, its credential hook raised {type(failed.cause).__name__}")
            raise
        if not replica.credentials.expired(token):
            return False
        self.note(f"{replica.name} {what} with token {token}, expired ({'alone' if alone else 'beside another'})")
        if alone and replica.credentials.expired(token, began) and not replica.credentials.held_back(began):
            self.broke(
                inv.CREDENTIAL_RENEWED,
                f"{replica.name} sent {what} with token {token} expired at {self.issued[token]:.3f}, its hook alone",
            )
        return True

    def delete(self, replica: Replica, namespace: str, name: str, uid: str, timeout: float) -> Answer:
        self.seq += 1
        try:
            expired = self._credential(replica, f"DELETE {namespace}/{name}")
        except NoCredential as failed:  # never on the wire: no request, no ``left`` (kube/api.py's _call)
            return Answer.unsent(failed.cause)
        # The request goes on the wire once the credential hook is done (it may have parked while another
        # request was answered), and the client says when: Answer.left, as kube/api.py's does.
        self.seq += 1
        left, left_at = self.seq, self.loop.time()
        if not replica.sends:
            self.broke(inv.DEAD_STAY_DEAD, f"{replica.name} sent a DELETE of {namespace}/{name} after it ended")
        row = self.row_of_uid(uid) if uid else None
        if row is None or (row.pod_namespace, row.pod_name) != (namespace, name):
            self.broke(inv.UID_PRECONDITION, f"DELETE {namespace}/{name} with uid {uid!r}, no row's UID for it")
        elif (kept := self.kept_before_claim(row)) is not None:
            self.broke(inv.KEPT_NEVER_SENT, f"row {row.id} sent while {kept} (kept before its claim)")
        # the replication guard: a failover as the request goes out could lose the retire
        broken = (
            None if self.guard is None or row is None else check_send(self.guard, row, self.memory.replication, left_at)
        )
        if broken is not None:
            self.broke(*broken)
        if self.large is not None and row is not None:  # the transaction rule: a large one released first
            unreleased = self.large.check_send(row, self.memory, self.resumed_at)
            if unreleased is not None:
                self.broke(*unreleased)
        kind = "none" if self.down else "401" if expired else self._draw_answer()
        answer, applied = self._answer(kind, namespace, name, uid, timeout)
        self.seq += 1
        if answer.answered:
            self.answered_seq = self.seq
        self.requests.append(
            Request(
                self.loop.time(),
                replica.name,
                namespace,
                name,
                uid,
                answer.label,
                self.seq,
                left,
                self.down,
            )
        )
        self.note(f"{replica.name} DELETE {namespace}/{name} {uid[:8]} -> {kind} {answer.label} applied={applied}")
        return dataclasses.replace(answer, left=left_at)

    def _draw_answer(self) -> str:
        if self.healed:
            return "real"
        return self.rng.choices(ANSWER_KINDS, self.faults.answers)[0]

    def _answer(self, kind: str, namespace: str, name: str, uid: str, timeout: float) -> tuple[Answer, bool]:
        loop = self.loop
        if kind in ("429", "500", "503", "410", "401", "403"):
            loop.charge(self.rng.uniform(0.001, 0.05))
            status = int(kind)
            reason = {401: "Unauthorized", 403: "Forbidden", 410: "Gone", 429: "TooManyRequests"}.get(status)
            retry_after = 1.0 if status == 429 else None
            return Answer.of(status, reason, f"scripted {status}", retry_after=retry_after), False
        if kind in ("none", "none_applied"):
            applied = kind == "none_applied" and self._apply(namespace, name, uid)[1]
            loop.charge(timeout)
            return Answer.none("timed out (scripted)", kind="TimeoutError"), applied
        latency = self.rng.uniform(0.001, 0.02) if kind == "real" else self.rng.uniform(0.0, 2 * timeout)
        answer, applied = self._apply(namespace, name, uid)
        if latency >= timeout:  # the server acted, the answer never came in time
            loop.charge(timeout)
            return Answer.none("timed out (scripted, slow)", kind="TimeoutError"), applied
        loop.charge(latency)
        return answer, applied

    def _apply(self, namespace: str, name: str, uid: str) -> tuple[Answer, bool]:
        """The real API server's DELETE under the UID precondition (and the client's GET after a 409); a
        pod with a grace period is left terminating (its answer says for how long)."""
        pod = self._pod(namespace, name)
        if pod is None:
            return Answer.of(404, "NotFound"), False
        if uid and pod.uid != uid:
            return Answer.of(409, "Conflict", holder_uid=pod.uid), False
        if pod.active:
            self.broke(inv.NO_ACTIVE_DELETED, f"pod {namespace}/{name} uid {pod.uid[:8]} of an active generation")
        if pod.grace:
            if pod.gone_at is None:
                pod.gone_at = self.loop.time() + pod.grace + pod.linger
            return Answer.of(200, "OK", grace_seconds=pod.grace), True
        del self.pods[(namespace, name)]
        return Answer.of(200, "OK"), True

    def _pod(self, namespace: str, name: str) -> Pod | None:
        """The pod holding the name now: a terminating one is gone once its time came (its kubelet
        finished), unless its node is gone (no kubelet will)."""
        pod = self.pods.get((namespace, name))
        ended = pod is not None and pod.gone_at is not None and pod.gone_at <= self.loop.time()
        if ended and pod is not None and pod.node not in self.nodes_gone:
            del self.pods[(namespace, name)]
            return None
        return pod

    # --- the confirmer's requests (a run with terminating pods) ----------------------------------------

    def _look(self, replica: Replica, what: str) -> None:
        """What every request of the confirmer's goes through before its answer: the credential hook, the
        outage, a fault drawn; each a ``KubeError`` as the client raises it (``unsent`` when the hook
        raised)."""
        try:
            expired = self._credential(replica, what)
        except NoCredential as failed:
            raise KubeError(Answer.unsent(failed.cause)) from failed
        self.loop.charge(self.slow.uniform(0.001, 0.02))
        if self.down:
            raise KubeError(Answer.none("down (scripted)", kind="ConnectionRefusedError"))
        if expired:
            raise KubeError(Answer.of(401, "Unauthorized", "expired token (scripted)"))
        if not self.healed and self.slow.random() < 0.05:
            raise KubeError(Answer.of(500, "InternalError", "scripted 500"))
        self.seq += 1
        self.answered_seq = self.seq

    def pod_state(self, replica: Replica, namespace: str, name: str) -> PodState | None:
        self._look(replica, f"GET {namespace}/{name}")
        pod = self._pod(namespace, name)
        return None if pod is None else PodState(pod.uid, pod.node, namespace, name, deleting=pod.gone_at is not None)

    def node_exists(self, replica: Replica, node: str) -> bool:
        self._look(replica, f"GET node {node}")
        return node not in self.nodes_gone

    def force_delete(self, replica: Replica, namespace: str, name: str, uid: str) -> Answer:
        """A DELETE with no grace, under the UID precondition: ``stuck_only_by_the_databases_clock``
        checked against the row's ``done_at`` on the store's clock (the database's)."""
        self._look(replica, f"force DELETE {namespace}/{name}")
        if not replica.sends:
            self.broke(inv.DEAD_STAY_DEAD, f"{replica.name} force-deleted {namespace}/{name} after it ended")
        row = self.row_of_uid(uid) if uid else None
        if row is None or (row.pod_namespace, row.pod_name) != (namespace, name):
            self.broke(inv.UID_PRECONDITION, f"force DELETE {namespace}/{name} with uid {uid!r}, no row's UID for it")
        else:
            self.check_stuck(row, f"{replica.name} force-deleted {namespace}/{name}")
        pod = self._pod(namespace, name)
        if pod is None:
            raise KubeError(Answer.of(404, "NotFound"))
        if pod.uid != uid:
            raise KubeError(Answer.of(409, "Conflict", holder_uid=pod.uid))
        if pod.active:
            self.broke(inv.NO_ACTIVE_DELETED, f"pod {namespace}/{name} uid {pod.uid[:8]} of an active generation")
        if pod.node not in self.nodes_gone:
            self.broke(
                inv.FORCED_ONLY_NODE_GONE, f"{replica.name} forced {namespace}/{name} on {pod.node}, which lives"
            )
        del self.pods[(namespace, name)]
        self.note(f"{replica.name} force DELETE {namespace}/{name} {uid[:8]}")
        return Answer.of(200, "OK")

    def check_stuck(self, row: Row, what: str) -> None:
        """``stuck_only_by_the_databases_clock``: nothing is judged stuck before ``STUCK_SECONDS`` of the
        database's time since the row's DELETE was recorded (``done_at``)."""
        age = None if row.done_at is None else self.memory.clock() - row.done_at
        if age is None or age <= STUCK_SECONDS:
            self.broke(inv.STUCK_BY_THE_DATABASE, f"{what}: row {row.id} recorded deleted {age} s ago on the database")

    def probe(self, replica: Replica) -> Answer:
        try:
            expired = self._credential(replica, "a probe")
        except NoCredential as failed:  # as KubeClient.probe: unsent, the outage gate held closed
            return Answer.unsent(failed.cause)
        self.loop.charge(self.rng.uniform(0.001, 0.05))
        if self.down:
            return Answer.none("down (scripted)", kind="ConnectionRefusedError")
        self.seq += 1
        self.answered_seq = self.seq
        return Answer.of(401, "Unauthorized", "expired token (scripted)") if expired else Answer.of(200)

    # --- the database's round trips ----------------------------------------------------------------

    async def round_trip(self, replica: Replica) -> None:
        """One statement's way to the server or back: mostly a few milliseconds, sometimes a tenth of a
        second, and at the seed's rate a stall of seconds (a frozen connection; leases run out behind it)."""
        rng = self.rng
        if self.faults.db_stall and not self.healed and rng.random() < self.faults.db_stall:
            replica.db_trouble = True
            await asyncio.sleep(rng.uniform(2.0, 9.0))
        else:
            await asyncio.sleep(rng.uniform(0.0, 0.004) if rng.random() < 0.95 else rng.uniform(0.01, 0.3))

    def db_fails(self, replica: Replica, rate: float) -> bool:
        if not self.healed and rate > 0 and self.rng.random() < rate:
            replica.db_trouble = True
            return True
        return False

    # --- the run ------------------------------------------------------------------------------------

    def add_row(self, i: int, *, transaction: int | None = None, rng: random.Random | None = None) -> Row:
        """A retire, in a host transaction of its own unless ``transaction`` is given; drawn from ``rng``
        (the world's unless given)."""
        rng = self.rng if rng is None else rng
        namespace = rng.choice(NAMESPACES)
        uid = uuid.UUID(int=rng.getrandbits(128))
        row = self.memory.retire(f"s{i}", namespace=namespace, uid=uid, transaction=transaction)
        if rng.random() < 0.9:  # else the pod is already gone: the DELETE answers 404
            pod = self.pods[(namespace, row.pod_name)] = Pod(str(uid), row.sandbox_id, 1, active=False)
            if self.terminating:
                slow = self.slow
                pod.grace = slow.choice((0, 1, 3, 5))
                pod.linger = slow.choice((0.0, 0.0, 4.0, 20.0, math.inf)) if pod.grace else 0.0
                pod.node = slow.choice(NODES)
        self.note(f"retire row {row.id} {namespace}/{row.pod_name} {str(uid)[:8]}")
        return row

    def start_replica(self) -> Replica:
        self._names += 1
        replica = Replica(self, f"r{self._names}")
        self.replicas.append(replica)
        self.note(f"{replica.name} start")
        return replica

    def run(self) -> None:
        """The whole run; raises ``Broken`` at the first violation."""
        loop = self.loop
        logger.disable("pod_sweeper")  # the replicas' log lines cost more than the run; the trace says it
        # No collection of cycles during the run: a collected async generator's finalizer would schedule
        # its aclose() on the loop at a moment the garbage collector picks, not the seed.
        collecting = gc.isenabled()
        gc.disable()
        try:
            loop.run_until_complete(self._main())
        finally:
            self._close()
            logger.enable("pod_sweeper")
            if collecting:
                gc.enable()
        if self.violation is not None:
            raise Broken(self.seed, self.violation)

    def _close(self) -> None:
        loop = self.loop
        loop.on_step = None
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            waiter = loop.create_task(asyncio.wait(pending, timeout=60))
            for _ in range(3):  # a stop left queued by the run's end (a violation in its last step) ends one
                with contextlib.suppress(RuntimeError):
                    loop.run_until_complete(waiter)
                    break
        loop.abandon_handoffs()
        loop.close()

    async def _main(self) -> None:
        if self.guard is not None:
            self.note(self.guard.describe())
        if self.provider is not None:
            self.note(self.provider.describe())
        if self.large is not None:
            self.note(self.large.describe())
        rows = self.rng.randint(3, 10)
        for i in range(rows):
            self.add_row(i)
        if self.reconcile is not None:
            self.reconcile.populate()
        for _ in range(self.n_replicas):
            self.start_replica()
        start = self.loop.time()
        events = self._script(rows)
        for at, _, action in sorted(events, key=lambda e: (e[0], e[1])):
            await asyncio.sleep(max(0.0, start + at - self.loop.time()))
            action()
        await asyncio.sleep(max(0.0, start + HORIZON - self.loop.time()))
        await self._heal()

    def _script(self, rows: int) -> list[tuple[float, int, Callable[[], None]]]:
        rng, faults = self.rng, self.faults
        events: list[tuple[float, int, Callable[[], None]]] = []

        def at(action: Callable[[], None], start: float = 0.0) -> None:
            events.append((rng.uniform(start, HORIZON), len(events), action))

        arrivals = iter(range(rows, rows + faults.arrivals))
        for _ in range(faults.arrivals):
            at(lambda: self._arrive(next(arrivals)))
        for _ in range(faults.replacements):
            at(self._replace)
        for _ in range(faults.activations):
            at(self._activate)
        for _ in range(faults.keeps):
            at(self._keep)
        for _ in range(faults.kills):
            # killed at a step, not a time: some step of the next few hundred from the event on
            at(lambda: self._kill_at(self.loop.steps + self.rng.randrange(400)))
        for _ in range(faults.stops):
            at(self._stop_one)
        if faults.outage:
            at(self._outage)
        if faults.breaker:
            for _ in range(2):
                at(self._reset_breaker)
        for _ in range(self.discards):
            events.append((self.later.uniform(0.0, HORIZON), len(events), self._discard))
        if self.surge:
            self._bursts(events, rows + faults.arrivals)
        if self.guard is not None:
            for when in self.guard.reopens:
                events.append((when, len(events), self._reopen))
        if self.reconcile is not None:
            self.reconcile.script(events)
        if self.large is not None:
            first = LARGE_FIRST_ID
            for when, size in self.large.batches:
                events.append((when, len(events), functools.partial(self._retire_together, first, size)))
                first += size
            for when in self.large.ends:
                events.append((when, len(events), self._end_transaction))
        if self.terminating:
            for _ in range(self.slow.choice((0, 1, 2, 3))):
                events.append((self.slow.uniform(0.0, HORIZON), len(events), self._jump))
            if self.slow.random() < 0.5:
                events.append((self.slow.uniform(0.0, HORIZON), len(events), self._node_gone))
        return events

    def _bursts(self, events: list[tuple[float, int, Callable[[], None]]], first: int) -> None:
        """One or two bursts of retires (a script, a bad migration run in many transactions): 8 to 24
        within a tenth of a second to a second and a half, some over the surge rule's floor, some under;
        and the on-call's ``reset-breaker`` once or twice."""
        surging = self.surging
        sizes = [surging.randint(8, 24) for _ in range(surging.choice((1, 1, 2)))]
        ids = iter(range(first, first + sum(sizes)))
        for size in sizes:
            start, spread = surging.uniform(0.0, HORIZON - 2.0), surging.uniform(0.1, 1.5)
            for _ in range(size):
                events.append((start + surging.uniform(0.0, spread), len(events), lambda: self._arrive(next(ids))))
        for _ in range(surging.choice((1, 2))):
            events.append((surging.uniform(0.0, HORIZON), len(events), self._reset_breaker))

    def _jump(self) -> None:
        """One live replica's wall clock jumps forward or back (NTP stepping it, a VM resumed); the
        database's clock does not."""
        live = [r for r in self.replicas if r.alive]
        if live:
            replica = self.slow.choice(live)
            by = self.slow.choice((-1.0, 1.0)) * self.slow.uniform(5.0, 600.0)
            replica.skew += by
            self.note(f"{replica.name} wall clock jumps {by:+.3f} s")

    def _node_gone(self) -> None:
        """A node vanishes: its terminating pods never end by themselves (the confirmer may force them)."""
        node = self.slow.choice(NODES)
        self.nodes_gone.add(node)
        self.note(f"node {node} gone")

    def _discard(self) -> None:
        """The on-call's ``pod-sweeper discard`` of one row, pending or dead (a claimed row is left alone):
        done, outcome discarded, its pod left where it is."""
        rows = [r for r in self.memory.rows.values() if r.status in (Status.PENDING, Status.DEAD)]
        if not rows:
            return
        row = self.later.choice(rows)
        for row_id in self.memory.discard([row.id]):
            self.done[row_id] = self.done.get(row_id, 0) + 1
            self.note(f"discard row {row_id}")
            if self.large is not None:
                self.large.discarded(row, self.memory)

    def _reopen(self) -> None:
        """A generation whose row ended skipped_active is retired again (a run with the replication guard):
        the trigger reopens its row, a new enqueue at a new WAL position, and its pod is no longer active."""
        skipped = [r for r in self.memory.rows.values() if r.outcome is Outcome.SKIPPED_ACTIVE]
        if not skipped:
            return
        row = skipped[0]
        if self.memory.reopen(row):
            self.done[row.id] = self.done.get(row.id, 0) - 1  # open again: it ends done once more
            pod = self.pods.get((row.pod_namespace, row.pod_name))
            if pod is not None and pod.uid == str(row.pod_uid):
                pod.active = False
            if self.reconcile is not None:  # one generation, one truth: the pass's table retires it too
                self.reconcile.retired((row.sandbox_id, row.generation))
            self.note(f"reopen row {row.id} (enqueued at WAL {row.enqueue_lsn})")

    def _retire_together(self, first: int, size: int) -> None:
        """``size`` retires in one host transaction (a platform retiring a customer's workspace at once)."""
        assert self.large is not None
        transaction = self.memory.transactions.begin()
        for i in range(first, first + size):
            self.add_row(i, transaction=transaction, rng=self.large.rng)
        self.large.retired(transaction, self.loop.time(), size)
        self.note(f"host transaction {transaction} retires {size} rows")

    def _end_transaction(self, how: str | None = None) -> None:
        """The on-call's ``release-transaction ID`` or ``discard-transaction ID`` of one transaction a claim
        kept back (``how``: drawn unless given)."""
        large = self.large
        assert large is not None
        chosen = large.choose()
        if chosen is None:
            return
        transaction, drawn = chosen
        how = how or drawn
        found = self.memory.transactions.found[transaction]
        pending = [
            r.id for r in self.memory.rows.values() if r.transaction == transaction and r.status is Status.PENDING
        ]
        ended = self.memory.end_transaction(found.id, how=how)
        assert ended is not None
        large.kept.discard(transaction)
        if how == "released":
            large.released.add(transaction)
        else:
            for row_id in pending:
                self.done[row_id] = self.done.get(row_id, 0) + 1
        self.note(f"{how} host transaction {transaction} ({ended['open_rows']} open rows)")

    def _kept_back(self, row: Row) -> bool:
        """Whether the row is kept back by a large transaction the on-call has not ended: it may stay open."""
        return self.large is not None and row.transaction in self.large.kept and row.status is Status.PENDING

    def _reset_breaker(self) -> None:
        """The on-call's ``reset-breaker``: closed, and the minute counted from now (``resumed_at``)."""
        if self.tripped is None:
            return
        self.tripped, self.resumed_at = None, self.loop.time()
        self.memory.transactions.reset_at = self.resumed_at  # the transaction rule reads it (breaker.resumed_at)
        self.memory._deleted_at.clear()
        self.note("breaker reset")

    def _arrive(self, i: int) -> None:
        self.add_row(i)

    def _live(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive and not r.stopping]

    def _replace(self) -> None:
        row = self.rng.choice(list(self.memory.rows.values()))
        key = (row.pod_namespace, row.pod_name)
        new = Pod(str(uuid.UUID(int=self.rng.getrandbits(128))), row.sandbox_id, row.generation + 1, active=True)
        self.pods[key] = new
        self.note(f"replace {key[0]}/{key[1]} with {new.uid[:8]} (active)")

    def _activate(self) -> None:
        fresh = [r for r in self.memory.rows.values() if r.status is Status.PENDING and r.claim_epoch == 0]
        if not fresh:
            return
        row = self.rng.choice(fresh)
        self.memory.activate(row.sandbox_id, row.generation)
        pod = self.pods.get((row.pod_namespace, row.pod_name))
        if pod is not None and pod.uid == str(row.pod_uid):
            pod.active = True
        self.note(f"activate row {row.id}")

    def _keep(self) -> None:
        rng = self.rng
        pod_uid: uuid.UUID | None = None
        namespace: str | None = None
        if rng.random() < 0.5:
            pod_uid = rng.choice(list(self.memory.rows.values())).pod_uid
            key = f"uid:{pod_uid}"
        else:
            namespace = rng.choice(NAMESPACES)
            key = f"ns:{namespace}"
        self.seq += 1
        self.kept_since.setdefault(key, self.seq)
        self.memory.keep(pod_uid=pod_uid, namespace=namespace)
        self.note(f"keep {key}")

        def release() -> None:
            self.kept_since.pop(key, None)
            self.memory.keep(pod_uid=pod_uid, namespace=namespace, kept=False)
            self.note(f"release {key}")

        self.loop.call_later(rng.uniform(1.0, 15.0), release)

    def _kill_at(self, step: int) -> None:
        bisect.insort(self._kill_steps, step)

    def _kill_now(self) -> None:
        live = [r for r in self.replicas if r.alive]
        if not live or self.healed:
            return
        self.rng.choice(live).kill()
        # a replica started in its place, as the Deployment would
        self.loop.call_later(self.rng.uniform(0.5, 10.0), self._restart)

    def _restart(self) -> None:
        if not self.healed:
            self.start_replica()

    def _stop_one(self) -> None:
        live = self._live()
        if live:
            self.rng.choice(live).stop()
            self.loop.call_later(self.rng.uniform(0.5, 10.0), self._restart)

    def _outage(self) -> None:
        self.down = True
        self.note("API server down")

        def up() -> None:
            self.down = False
            self.note("API server up")

        self.loop.call_later(self.rng.uniform(1.0, 20.0), up)

    async def _heal(self) -> None:
        """No more faults; every hold released; one fresh replica at least; run until every row ended,
        then stop every replica and check the end."""
        self.healed, self.down = True, False
        self.note("heal")
        for key in list(self.kept_since):
            self.kept_since.pop(key)
        self.memory._kept.clear()
        if not self._live():
            self.start_replica()
        for _ in range(int(SETTLE_LIMIT)):
            if self.large is not None and self.large.at_heal != "left":
                while self.large.kept:  # the on-call ends every transaction kept back, as drawn
                    self._end_transaction(self.large.at_heal)
            open_rows = (r for r in self.memory.rows.values() if r.status in (Status.PENDING, Status.CLAIMED))
            if all(self._kept_back(r) for r in open_rows):
                break
            self._reset_breaker()  # the on-call resets it while the world settles
            await asyncio.sleep(1.0)
        if self.reconcile is not None:  # and until the passes have swept every old orphan
            await self.reconcile.settle()
        if self.terminating:  # and until the confirmer has settled every pod left terminating
            for _ in range(int(CONFIRM_LIMIT)):
                if not self.unsettled():
                    break
                await asyncio.sleep(1.0)
        # Every live replica's credential hook still renews: one request each, alone, once every token
        # it holds has expired (a hook that stopped renewing fails here however quiet the run went).
        live = self._live()
        if live:
            await asyncio.sleep(max(0.0, max(r.credentials.expiry for r in live) - self.loop.time()) + 0.001)
        for replica in live:
            if replica.alive and not replica.stopping:
                await self.loop.run_in_executor(None, self._credential, replica, "a last request")
        stops = [r.stop() for r in self._live()]
        await asyncio.gather(*stops)
        self._check_end()

    def unsettled(self) -> list[str]:
        """``a_terminating_pod_is_confirmed_or_reported``: what is still open of the rows whose DELETE left
        their pod terminating. Each ends confirmed once its pod is gone (or another holds its name); a pod
        that stays is reported stuck (past the limit, on the database's clock), forced once its node is
        gone, and confirmed once it is gone (forced, or its kubelet done at last); only a pod that never
        ends, on a node that lives, is left, reported stuck. The healed world waits for none to be left,
        up to ``CONFIRM_LIMIT``."""
        now, found = self.memory.clock(), []
        for row in self.memory.rows.values():
            if row.done_at is None or row.outcome is not Outcome.DELETED:
                continue
            pod = self._pod(row.pod_namespace, row.pod_name)
            age = now - row.done_at
            if row.confirmed_at is not None or row.confirm_after is None:
                # Confirmed (by a look, or at once by a DELETE that left nothing terminating): judged by
                # the world's pods, not the row's columns, so a confirmation the pod belies is found too.
                if pod is not None and pod.uid == str(row.pod_uid) and not pod.active:
                    found.append(f"row {row.id} confirmed, its pod still there {age:.3f} s after its DELETE")
                continue
            if pod is None or pod.uid != str(row.pod_uid):
                found.append(f"row {row.id}'s pod is gone, not confirmed {age:.3f} s after its DELETE")
            elif pod.node in self.nodes_gone:
                found.append(f"row {row.id}'s pod on {pod.node}, gone, not forced {age:.3f} s after its DELETE")
            elif row.stuck_at is None:
                found.append(f"row {row.id}'s pod still terminating {age:.3f} s after its DELETE, not reported stuck")
            elif pod.gone_at is not None and pod.gone_at < math.inf:  # it ends: its next look confirms it
                found.append(f"row {row.id}'s pod, reported stuck, ends at {pod.gone_at:.3f}, not yet confirmed")
        return found

    def _check_end(self) -> None:
        if self.terminating and (unsettled := self.unsettled()):
            self.broke(inv.TERMINATING_SETTLED, f"up to {CONFIRM_LIMIT:.0f} s after the rows ended: {unsettled[0]}")
        for row in self.memory.rows.values():
            if self._kept_back(row):  # a large transaction never released nor discarded: open, by design
                continue
            if row.status in (Status.PENDING, Status.CLAIMED):
                self.broke(inv.DONE_ONCE, f"row {row.id} still {row.status} {SETTLE_LIMIT:.0f} s after healing")
            elif row.status is Status.DEAD and row.last_http_status != 410:
                self.broke(inv.DONE_ONCE, f"row {row.id} dead without a request refused for good: {row.last_error}")
            elif row.status is Status.DONE and self.done.get(row.id, 0) != 1:
                self.broke(inv.DONE_ONCE, f"row {row.id} became done {self.done.get(row.id, 0)} times")
            pod = self._pod(row.pod_namespace, row.pod_name)
            # a pod terminating after its DELETE is deleted (its grace, a slow kubelet, a node gone)
            kept = pod is not None and pod.uid == str(row.pod_uid) and not pod.active and pod.gone_at is None
            if row.status is Status.DONE and kept and row.outcome is not Outcome.DISCARDED:  # a discard leaves it
                self.broke(inv.DONE_ONCE, f"row {row.id} done ({row.outcome}) but its pod is still there")
        self.note("end " + " ".join(f"{r.id}:{r.status}:{r.outcome}:{r.attempts}" for r in self.memory.rows.values()))


class SimKube:
    """One replica's ``SweepKube``: its requests go to the world's scripted API server."""

    def __init__(self, world: World, replica: Replica) -> None:
        self.world, self.replica = world, replica

    def delete_pod(self, namespace: str, name: str, uid: str, *, timeout: float, dry_run: bool = False) -> Answer:
        return self.world.delete(self.replica, namespace, name, uid, timeout)

    def probe(self, *, timeout: float) -> Answer:
        return self.world.probe(self.replica)

    def create_event(self, event: PodEvent, *, timeout: float) -> Answer:
        return Answer.of(201)

    # ``PodKube``, the confirmer's (a run with terminating pods)

    def pod_state(self, namespace: str, name: str, *, timeout: float) -> PodState | None:
        return self.world.pod_state(self.replica, namespace, name)

    def list_pods(
        self, namespace: str, label_selector: str, *, limit: int, continue_token: str | None, timeout: float
    ) -> PodPage:
        raise AssertionError("the reconciler's requests are tests/sim/reconcile.py's ReconcileKube's")

    def node_exists(self, name: str, *, timeout: float) -> bool:
        return self.world.node_exists(self.replica, name)

    def force_delete(self, namespace: str, name: str, uid: str, *, timeout: float) -> Answer:
        return self.world.force_delete(self.replica, namespace, name, uid)

    def wall_now(self) -> datetime:
        """The replica's host's ``datetime.now(UTC)``: the virtual time (the database's clock) and the
        replica's skew, which the script's clock jumps move. Nothing in the daemon reads it; the mutant
        ``stuck_by_the_wall_clock`` does, as the confirmer once read its wall clock."""
        return datetime.fromtimestamp(self.world.loop.time() + self.replica.skew, UTC)


class SimRows:
    """One replica's confirmer's ``TerminatingRows``: the memory store's two statements (held to
    sql/confirm_claim.sql and sql/confirm_result.sql by the store contract test), each a round trip, and at
    the seed's rate a connection lost before it applies or a take whose answer is lost (its rows put off)."""

    def __init__(self, world: World, replica: Replica) -> None:
        self.world, self.replica = world, replica

    async def _trip(self) -> None:
        world = self.world
        await asyncio.sleep(world.slow.uniform(0.0, 0.004))
        if not world.healed and world.slow.random() < world.faults.db_fail:
            raise psycopg.OperationalError("connection lost (scripted)")

    async def take_due(self, *, batch: int, recheck_seconds: float) -> list[Terminating]:
        world = self.world
        await self._trip()
        taken = world.memory.take_terminating(batch=batch, recheck_seconds=recheck_seconds)
        if taken:
            world.note(f"{self.replica.name} confirm take [{' '.join(str(t.id) for t in taken)}]")
        await asyncio.sleep(world.slow.uniform(0.0, 0.004))
        if not world.healed and world.slow.random() < world.faults.commit_lost:
            raise psycopg.OperationalError("the answer never arrived (scripted)")
        return taken

    async def record(self, *, ids: list[int], gone: list[bool], stuck: list[bool]) -> None:
        world = self.world
        await self._trip()
        for row_id, was_stuck in zip(ids, stuck, strict=True):
            row = world.memory.rows[row_id]
            if was_stuck and row.stuck_at is None:
                world.check_stuck(row, f"{self.replica.name} reported row {row_id}'s pod stuck")
        world.memory.record_terminating(ids=ids, gone=gone, stuck=stuck)
        world.note(
            f"{self.replica.name} confirm record "
            + " ".join(f"{i}:{g}:{t}" for i, g, t in zip(ids, gone, stuck, strict=True))
        )
        await asyncio.sleep(world.slow.uniform(0.0, 0.004))


class _Cursor:
    def __init__(self, row: dict[str, Any] | None) -> None:
        self.row = row

    async def fetchone(self) -> dict[str, Any] | None:
        return self.row


class SurgePool:
    """One replica's surge watch's pool (a run with the surge rule on): its three statements, sql/
    breaker_recent_rate.sql, sql/breaker_arrivals.sql and sql/breaker_trip.sql, are the memory store's
    ``recent_rate``, ``arrivals`` and ``trip`` (held to them by the store contract test), each a round
    trip of a few milliseconds; the breaker's reason and its last reset are the world's. Before the world
    heals they fail at the seed's rate (tests/sim/surge_db.py): a connection lost at the checkout or before a
    statement applied, and a trip whose answer was lost after it committed."""

    def __init__(self, world: World, replica: Replica) -> None:
        self.world, self.replica = world, replica

    def connection(self) -> AbstractAsyncContextManager[Connection]:
        return self._connection()

    def _fails(self, what: str) -> None:
        """At the seed's rate, before the world heals: ``what`` happens (a ``psycopg.OperationalError``)."""
        world = self.world
        try:
            world.surge_db.fail(self.replica.name, world.loop.time(), world.healed, what)
        except psycopg.OperationalError:
            world.note(f"{self.replica.name}'s surge watch: {what}")
            raise

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        await asyncio.sleep(self.world.surging.uniform(0.0, 0.004))
        self._fails("connection lost at the checkout")
        yield cast(Connection, self)

    async def execute(self, query: str, params: dict[str, Any]) -> _Cursor:
        world = self.world
        await asyncio.sleep(world.surging.uniform(0.0, 0.004))
        self._fails("connection lost before the statement applied")
        row: dict[str, Any] | None = None
        if query == queries.load("breaker_arrivals"):
            arrived = world.memory.arrivals(
                window=params["window"],
                dry_run=params["dry_run"],
                shadow=tuple(params["shadow"] or ()),
                transaction_rows=params["transaction_rows"],
                reset_at=world.resumed_at,
            )
            row = {"arrived": arrived, "tripped_reason": world.tripped}
        elif query == queries.load("breaker_recent_rate"):
            row = {"rate": world.memory.recent_rate(seconds=params["seconds"])}
        elif query == queries.load("breaker_trip"):
            world.trip(self.replica, params["reason"], "surge watch")
        else:
            raise AssertionError(f"the simulator's surge watch knows no statement {query[:60]!r}")
        await asyncio.sleep(world.surging.uniform(0.0, 0.004))
        if query == queries.load("breaker_trip"):
            self._fails("the trip committed, its answer lost")
        return _Cursor(row)


class SimStore:
    """One replica's ``SweepStore``: the memory store's view, each statement a round trip the seed times
    and may fail (before it applies, or, at a commit, after: the answer lost)."""

    def __init__(self, world: World, replica: Replica, memory: MemoryStore) -> None:
        self.world, self.replica, self.memory = world, replica, memory

    def rediscover_in(self) -> float | None:
        return None

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[SimSession]:
        await self.world.round_trip(self.replica)
        if self.world.db_fails(self.replica, self.world.faults.db_fail):
            raise StoreError("connection lost (scripted)")
        yield SimSession(self)


class SimSession:
    def __init__(self, store: SimStore) -> None:
        self.store, self.world = store, store.world
        self._inner = MemorySession(store.memory)
        self._wrote = False  # a statement of this transaction applied: a later failure would roll it back
        self._locked = False  # this transaction holds the breaker row's lock (breaker_lock.sql)
        self._saw_trip: int | None = None  # the trip this transaction's read of the breaker found, if any
        # (row, epoch) of the claims this transaction took and of the verdicts it carries: what a cut-off
        # at the drain's deadline leaves to the lease
        self._at_stake: set[tuple[int, int]] = set()

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[object]:
        replica = self.store.replica
        self._saw_trip = None
        self._at_stake = set()
        try:
            yield None
            if self.world.db_fails(replica, self.world.faults.commit_lost):
                self.world.note(f"{replica.name} commit answer lost")
                raise StoreError("the commit's answer never arrived (scripted)")
        except asyncio.CancelledError:
            # Cut off at its drain's deadline (Sweeper.drain cancels a claim still unanswered then, and
            # gives the last record until then): on PostgreSQL it rolled back, or committed with its
            # answer lost; either way the rows it claimed or carried a verdict for are their lease's, as
            # designed, and only those. Before the deadline a cancelled claim is the bug
            # `claim_cancelled_at_stop` puts back.
            if self._at_stake and replica.deadline is not None and self.world.loop.time() >= replica.deadline:
                self.world.note(f"{replica.name} transaction cut off at the deadline")
                replica.cut_off |= self._at_stake
            raise
        finally:
            if self._locked:  # the breaker row's lock ends with the transaction
                self._locked = False
                self.world.breaker_lock.release()

    def transaction(self) -> AbstractAsyncContextManager[object]:
        return self._transaction()

    async def _statement(self, what: str, apply: Callable[[], Awaitable[T]]) -> T:
        world, replica = self.world, self.store.replica
        await world.round_trip(replica)
        if not self._wrote and world.db_fails(replica, world.faults.db_fail):
            raise StoreError(f"{what}: connection lost (scripted)")
        result = await apply()
        await world.round_trip(replica)
        return result

    async def claim(
        self,
        *,
        batch: int,
        lease_seconds: float,
        disarm: bool,
        at_claim: AtClaim,
        guard: list[str] | None,
        transaction_rows: int = 0,
        gathering: bool = False,
    ) -> ClaimedBatch:
        async def apply() -> ClaimedBatch:
            world, name = self.world, self.store.replica.name
            before = {row.id: row.status for row in world.memory.rows.values()}
            claimed = await self._inner.claim(
                batch=batch,
                lease_seconds=lease_seconds,
                disarm=disarm,
                at_claim=at_claim,
                guard=guard,
                transaction_rows=transaction_rows,
                gathering=gathering,
            )
            if claimed.to_send and world.tripped is not None and self._saw_trip == world.trips:
                world.broke(
                    inv.NO_CLAIM_PAST_TRIPPED,
                    f"{name} claimed {[c.id for c in claimed.to_send]} in a transaction that read the breaker tripped",
                )
            world.seq += 1
            self._at_stake.update((claim.id, claim.epoch) for claim in claimed.to_send)
            for claim in [*claimed.to_send, *(c for c, _ in claimed.decided)]:
                world.claimed_at[(claim.id, claim.epoch)] = (name, world.seq)
            for claim, verdict in claimed.decided:
                if verdict.status is Status.DONE and before.get(claim.id) is not Status.DONE:
                    world.done[claim.id] = world.done.get(claim.id, 0) + 1
            if claimed.to_send or claimed.decided:
                taken = " ".join(f"{c.id}@{c.epoch}" for c in claimed.to_send)
                decided = " ".join(f"{c.id}:{v.result}" for c, v in claimed.decided)
                world.note(f"{name} claim [{taken}] decided [{decided}]")
            return claimed

        self._wrote = True
        return await self._statement("claim", apply)

    async def guard_mark(self) -> int:
        return await self._statement("guard_mark", self._inner.guard_mark)

    async def record_results(self, verdicts: list[Verdict]) -> set[int]:
        async def apply() -> set[int]:
            world, name = self.world, self.store.replica.name
            rows = world.memory.rows
            # What the fence lets through, worked out here one verdict at a time (a batch may hold two
            # of one row: a claim whose lease ran out, and this replica's newer claim of it).
            state = {v.id: (rows[v.id].claim_epoch, rows[v.id].status) for v in verdicts if v.id in rows}
            fenced_in: list[Verdict] = []
            for verdict in verdicts:
                if state.get(verdict.id) == (verdict.epoch, Status.CLAIMED):
                    fenced_in.append(verdict)
                    state[verdict.id] = (verdict.epoch, verdict.status)
            owned = await self._inner.record_results(verdicts)
            for verdict in verdicts:
                if verdict.id not in owned:
                    continue
                epoch, status = state[verdict.id]
                row = rows[verdict.id]
                if verdict.id not in {v.id for v in fenced_in} or (row.claim_epoch, row.status) != (epoch, status):
                    world.broke(
                        inv.NO_RECORD_OVER_NEWER,
                        f"{name} recorded row {verdict.id} epoch {verdict.epoch} {verdict.result}: the row is now "
                        f"epoch {row.claim_epoch} {row.status}, the fence allows epoch {epoch} {status}",
                    )
            for verdict in fenced_in:
                sent = self._sent(verdict)
                if verdict.charged and sent is None:
                    world.broke(inv.NO_CHARGE_UNSENT, f"{name} charged row {verdict.id} ({verdict.result}), no request")
                elif verdict.charged and sent is not None and sent.down and world.answered_seq < sent.left:
                    world.broke(
                        inv.OUTAGE_CHARGES_NOTHING,
                        f"{name} charged row {verdict.id} for {sent.answer} while nothing was answered after it",
                    )
                if verdict.result is Result.DELETED and sent is not None and world.faults.breaker:
                    world.count_delete(sent.at)
                if verdict.status is Status.DONE:
                    world.done[verdict.id] = world.done.get(verdict.id, 0) + 1
                    if world.done[verdict.id] > 1:
                        world.broke(inv.DONE_ONCE, f"row {verdict.id} done a second time by {name}")
            self.store.replica.written.update((v.id, v.epoch) for v in verdicts)
            world.note(f"{name} record " + " ".join(f"{v.id}@{v.epoch}:{v.result}:{v.id in owned}" for v in verdicts))
            return owned

        self._wrote = True
        self._at_stake.update((v.id, v.epoch) for v in verdicts)
        return await self._statement("record_results", apply)

    def _sent(self, verdict: Verdict) -> Request | None:
        """The DELETE this replica last sent for the verdict's row since the claim the verdict is of."""
        world = self.world
        claimed = world.claimed_at.get((verdict.id, verdict.epoch))
        row = world.memory.rows[verdict.id]
        if claimed is None:
            return None
        uid, name = str(row.pod_uid), self.store.replica.name
        sent = [r for r in world.requests if r.replica == name and r.uid == uid and r.seq > claimed[1]]
        return sent[-1] if sent else None

    async def next_due(self) -> float | None:
        return await self._statement("next_due", self._inner.next_due)

    async def arm(self, *, take_over: bool = False) -> Arming:
        return await self._statement("arm", lambda: self._inner.arm(take_over=take_over))

    async def look_ahead(self, *, arm: bool, take_over: bool = False) -> tuple[float | None, Arming | None]:
        return await self._statement("look_ahead", lambda: self._inner.look_ahead(arm=arm, take_over=take_over))

    async def breaker_window(self) -> BreakerWindow:
        world = self.world
        if not self._locked:
            await world.breaker_lock.acquire()
            self._locked = True

        async def read() -> BreakerWindow:
            window = await self._inner.breaker_window()
            claimed = window.claimed
            if not BREAKER_AS_SQL:  # see BREAKER_AS_SQL: the claims that may still end in a delete
                now = world.loop.time()
                held = {
                    (replica.name, claim.id, claim.epoch)
                    for replica in world.replicas
                    if replica.alive
                    for claim in replica.sweeper.pipeline._inflight.values()
                }
                claimed = sum(
                    1
                    for r in world.memory.rows.values()
                    if r.status is Status.CLAIMED
                    and (r.next_attempt_at > now or (r.claimed_by, r.id, r.claim_epoch) in held)
                )
            self._saw_trip = world.trips if world.tripped is not None else None
            return dataclasses.replace(window, tripped_reason=world.tripped, claimed=claimed)

        return await self._statement("breaker_window", read)

    async def breaker_tripped(self) -> str | None:
        await self._statement("breaker_tripped", self._inner.breaker_tripped)
        world = self.world
        self._saw_trip = world.trips if world.tripped is not None else None
        return world.tripped

    async def trip_breaker(self, reason: str) -> None:
        async def trip() -> None:
            self.world.trip(self.store.replica, reason, "the claim")

        await self._statement("trip_breaker", trip)

    async def hand_on(self, *, stopping: bool = False) -> None:
        await self._statement("hand_on", lambda: self._inner.hand_on(stopping=stopping))

    async def keep_back_transaction(self, at: datetime, rows: int, reason: str) -> int | None:
        async def keep() -> int | None:
            world = self.world
            kept = await self._inner.keep_back_transaction(at, rows, reason)
            transaction = self._inner._found[at]
            found = world.memory.transactions.found[transaction]
            if world.large is not None and found.ended is None:
                world.large.kept.add(transaction)
            world.note(f"{self.store.replica.name} keeps back host transaction {transaction} ({rows} rows): {kept}")
            return kept

        return await self._statement("keep_back_transaction", keep)


class Replica:
    """One daemon: its sweeper and outage watch, as the runner builds them, on the world's loop."""

    def __init__(self, world: World, name: str) -> None:
        self.world, self.name = world, name
        self.alive, self.stopping = True, False
        self.db_trouble = False  # a statement of its failed, stalled or lost its answer
        self.deadline: float | None = None  # its drain's, once stopped
        self.cut_off: set[tuple[int, int]] = set()  # (row, epoch) its transactions cut off at the deadline left
        self.in_hand: set[tuple[int, int]] = set()  # (row, epoch) of the claims its pipeline held at the last step
        self.written: set[tuple[int, int]] = set()  # (row, epoch) of every verdict a record statement of its carried
        self.skew = 0.0  # seconds its wall clock runs ahead of the database's (the script's clock jumps)
        loop = world.loop
        settings = world.settings.model_copy(update={"replica_id": name})
        metrics = _METRICS
        self.kube = SimKube(world, self)
        self.credentials = Credentials(
            loop, random.Random(world.rng.getrandbits(64)), world.issued, name, lambda: self.alive, world.provider
        )
        memory = world.memory.view(name)
        memory.guard = settings.guard_standbys  # as the runner gives OutboxStore its guard
        self.store = SimStore(world, self, memory)
        pool = cast(AsyncConnectionPool[Connection], _NoPool())
        rng = random.Random(world.rng.getrandbits(64))
        reports = cast(AsyncConnectionPool[Connection], OutagePool(memory, world.reports, loop.time))
        self.outage = OutageWatch(settings, reports, self.kube, metrics, clock=loop.time, rng=rng)
        # The breaker's gate, shared by the sweeper and the surge watch as the runner shares it.
        breaker = BreakerGate() if world.surge else None
        self.sweeper = Sweeper(
            settings,
            self.store,
            self.kube,
            outage=self.outage,
            metrics=metrics,
            clock=loop.time,
            timer=loop.time,
            rng=rng,
            breaker=breaker,
        )
        self.tasks = [
            loop.create_task(self.sweeper.run(), name=f"{name}-sweeper"),
            loop.create_task(self.outage.run(), name=f"{name}-outage"),
        ]
        if world.terminating:
            self.confirmer = Confirmer(
                settings, pool, self.kube, metrics, self.outage, rows=SimRows(world, self), timer=loop.time
            )
            self.tasks.append(loop.create_task(self.confirmer.run(), name=f"{name}-confirmer"))
        self.surge_watch: SurgeWatch | None = None
        if breaker is not None:
            surge_pool = cast(AsyncConnectionPool[Connection], SurgePool(world, self))
            self.surge_watch = SurgeWatch(settings, surge_pool, breaker, metrics, clock=loop.time)
            self.tasks.append(loop.create_task(self.surge_watch.run(), name=f"{name}-surge"))
        if world.reconcile is not None:
            reconciler = world.reconcile.start(self, metrics)
            self.tasks.append(loop.create_task(reconciler.run(), name=f"{name}-reconciler"))
        for task in self.tasks:
            task.add_done_callback(self._ended)

    @property
    def sends(self) -> bool:
        return self.alive

    def check_hand(self) -> None:
        """``no_claim_in_hand_is_dropped``: a claim leaves the sweeper's pipeline only once a record
        statement carried its verdict (its row written, or handed back); else a drain would neither wait
        for its request nor hand it back."""
        held = {(claim.id, claim.epoch) for claim in self.sweeper.pipeline._inflight.values()}
        if dropped := sorted(self.in_hand - held - self.written):
            self.world.broke(
                inv.NO_CLAIM_DROPPED, f"{self.name} let {dropped} (row, epoch) out of hand with no verdict written"
            )
        self.in_hand = held

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and not isinstance(error, Broken):
            self.world.broke(inv.NO_TASK_DIES, f"{task.get_name()} died: {error!r}")

    def kill(self) -> None:
        """SIGKILL: every task gone at once, its memory lost; its claims wait out their lease."""
        if not self.alive:
            return
        self.alive = False
        self.world.note(f"{self.name} killed")
        # Every task of it, the sweeper's own included, at this step: a task already woken would
        # otherwise take one more step before its task group passes the cancellation on.
        for task in [*self.tasks, *self.sweeper._tasks, self.outage._probing]:
            if task is not None:
                task.cancel()

    def stop(self) -> asyncio.Future[None]:
        """SIGTERM: the sweeper's drain with the shutdown deadline, then its tasks end."""
        self.stopping = True
        self.world.note(f"{self.name} stop")
        loop = self.world.loop

        self.deadline = deadline = loop.time() + self.world.settings.shutdown_timeout

        async def drain() -> None:
            await self.sweeper.drain(deadline)
            self.world.note(f"{self.name} drained")
            self.kill_quietly()
            left = [row.id for row in self.world.memory.rows.values() if row.claimed_by == self.name]
            rows = self.world.memory.rows
            left = [
                i for i in left if rows[i].status is Status.CLAIMED and (i, rows[i].claim_epoch) not in self.cut_off
            ]
            if left and not self.db_trouble:
                self.world.broke(inv.STOP_HANDS_BACK, f"{self.name} stopped with rows {left} still claimed")

        task = loop.create_task(drain(), name=f"{self.name}-drain")
        self.tasks.append(task)
        task.add_done_callback(self._ended)
        return task

    def kill_quietly(self) -> None:
        self.alive = False
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()


def run_seed(seed: int) -> World:
    """Run one seed to its end; ``Broken`` at its first violation."""
    world = World(seed)
    world.run()
    return world
