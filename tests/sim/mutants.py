"""Bugs put back, to prove the simulator finds what matters: each a patched copy of one function (or a
wrapper of it) in the test tree, applied over the real one for one test (``monkeypatch``) or one
command (``python -m tests.sim --mutant NAME``); nothing in the shipped code knows of them.

Each names the invariant that should catch it. ``uid_dropped``, ``claim_cancelled_at_stop``,
``handed_back_charged``, ``unsent_charged``, ``outage_ignored``, ``sent_stamped_before_the_hook``,
``budget_ignores_claimed``, ``one_claim_per_row``, ``refresh_swap_unguarded``, ``stuck_by_the_wall_clock``,
``force_whatever_the_node``, ``never_forcing``, ``grace_not_confirmed``, ``surge_looked_at_once_a_minute``,
``surge_watch_ends_at_a_failure``, ``claim_past_a_tripped_breaker``, ``guard_flush_check_skipped``,
``transaction_rule_dropped``, ``reconcile_age_by_the_wall_clock``,
``reconcile_active_suspected`` and ``reconcile_generation_label_misread`` patch the daemon's own code;
``fence_dropped`` and ``keeping_ignored`` patch the memory store, which stands for the SQL where the
claim-epoch fence (sql/record_results.sql) and the holds and pauses (``pod_sweeper.keeping``) live.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import psycopg
from loguru import logger

from harness.memstore import MemorySession, MemoryStore, Row
from pod_sweeper.core import periodic
from pod_sweeper.core.errors import first_line
from pod_sweeper.core.states import Outcome, Result, Status
from pod_sweeper.kube.answer import Answer, Said
from pod_sweeper.kube.config import ThrottledRefresh
from pod_sweeper.kube.errors import KubeError
from pod_sweeper.kube.interface import PodEvent, PodState, SweepKube
from pod_sweeper.store.db import Connection
from pod_sweeper.store.interface import SweepSession
from pod_sweeper.store.rows import Attempt, BreakerWindow, Claim, ClaimedBatch, LargeTransaction, Verdict
from pod_sweeper.store.sweep import quarantine
from pod_sweeper.store.sweep.recheck import Attachment, Generation, generations
from pod_sweeper.tasks.loops.confirmer import BATCH, RECHECK_SECONDS, Confirmer
from pod_sweeper.tasks.loops.outage import OutageWatch
from pod_sweeper.tasks.loops.reconciler import Reconciler, _Suspect
from pod_sweeper.tasks.loops.surge import QUIET_LOOK_SECONDS, SurgeWatch
from pod_sweeper.tasks.rules import verdicts
from pod_sweeper.tasks.rules.surge import SURGE_INTERVAL
from pod_sweeper.tasks.rules.verdicts import Sent
from pod_sweeper.tasks.sweep import claimer
from pod_sweeper.tasks.sweep.pipeline import Pipeline, Work
from pod_sweeper.tasks.sweep.sender import Sender
from pod_sweeper.tasks.sweep.sweeper import Sweeper
from sim import invariants as inv

_SEND = Sender._send


class _KubeProxy:
    """A ``SweepKube`` passing every call to the real one (a mutant overrides the DELETE)."""

    def __init__(self, kube: SweepKube) -> None:
        self.kube = kube

    def delete_pod(self, namespace: str, name: str, uid: str, *, timeout: float, dry_run: bool = False) -> Answer:
        return self.kube.delete_pod(namespace, name, uid, timeout=timeout, dry_run=dry_run)

    def probe(self, *, timeout: float) -> Answer:
        return self.kube.probe(timeout=timeout)

    def create_event(self, event: PodEvent, *, timeout: float) -> Answer:
        return self.kube.create_event(event, timeout=timeout)


class _NoUid(_KubeProxy):
    def delete_pod(self, namespace: str, name: str, uid: str, *, timeout: float, dry_run: bool = False) -> Answer:
        return self.kube.delete_pod(namespace, name, "", timeout=timeout, dry_run=dry_run)  # MUTANT: was uid


class _NoWireStamp(_KubeProxy):
    """DELETEs whose answers do not say when the request went on the wire."""

    def delete_pod(self, namespace: str, name: str, uid: str, *, timeout: float, dry_run: bool = False) -> Answer:
        answer = self.kube.delete_pod(namespace, name, uid, timeout=timeout, dry_run=dry_run)
        return dataclasses.replace(answer, left=None)  # MUTANT: was the client's answer, with when it left


def _sending_through(self: Sender, chunk: list[Work], proxy: type[_KubeProxy]) -> list[Sent | None]:
    """The real ``Sender._send``, its client wrapped in ``proxy`` for the chunk."""
    kube = self.kube
    self.kube = proxy(kube)
    try:
        return _SEND(self, chunk)
    finally:
        self.kube = kube


def send_without_uid(self: Sender, chunk: list[Work]) -> list[Sent | None]:
    """``Sender._send`` with the UID precondition dropped: the DELETE goes by name alone."""
    return _sending_through(self, chunk, _NoUid)


def send_stamped_before_the_hook(self: Sender, chunk: list[Work]) -> list[Sent | None]:
    """``Sender._send`` judging each request from its own stamp, taken before the client's credential
    hook (issue 53's simulator found it): the answers' ``left`` withheld, the sender falls back to it."""
    return _sending_through(self, chunk, _NoWireStamp)


def record_without_fence(self: MemorySession, batch: list[Verdict]) -> set[int]:
    """``MemorySession._record`` with the claim-epoch fence dropped (the claimed status still checked)."""
    store, now = self._store, self._store.clock()
    owned = set()
    for verdict in batch:
        row = store.rows.get(verdict.id)
        if row is None:
            continue
        if verdict.attempt is not None:
            row.results.append(verdict.result)
        if row.status is not Status.CLAIMED:  # MUTANT: was `row.claim_epoch != verdict.epoch or ...`
            continue
        owned.add(row.id)
        row.status, row.outcome = verdict.status, verdict.outcome
        if not verdict.charged:
            row.attempts -= 1
        if verdict.status is Status.PENDING:
            row.next_attempt_at = now + verdict.delay
        if verdict.status is Status.DONE:
            row.last_error, row.last_http_status = None, verdict.http_status
        else:
            row.last_error = verdict.error or row.last_error
            row.last_http_status = verdict.http_status or row.last_http_status
        if verdict.result is Result.DELETED:
            store._deleted_at.append((now, row.pod_namespace))
        row.done_at = now if verdict.status is Status.DONE else None
        row.confirm_after = None if verdict.confirm_in is None else now + verdict.confirm_in
        deleted = verdict.outcome is Outcome.DELETED
        row.confirmed_at = now if deleted and verdict.confirm_in is None else None
    return owned


_drain = Sweeper.drain


async def drain_cancelling_the_claim(self: Sweeper, deadline: float) -> None:
    """``Sweeper.drain`` as it was before issue 53's first bug was fixed: the claimer cancelled wherever
    it stands, a claim the server committed and answered too late included."""
    if (claimer := self._task("claimer")) is not None:
        claimer.cancel()  # MUTANT: the drain let a claim in flight come back instead
    await _drain(self, deadline)


_DECIDE = verdicts.decide


def decide_without_confirming(claim: Claim, sent: Sent, policy: verdicts.Policy, **why: Any) -> Verdict:
    """``verdicts.decide`` with a DELETE that left its pod terminating taken as done with it: no look
    after its grace period, the row confirmed at once while its pod is still there."""
    return dataclasses.replace(_DECIDE(claim, sent, policy, **why), confirm_in=None)  # MUTANT: was the grace's


def decide_charging_the_unsent(claim: Claim, sent: Sent, policy: verdicts.Policy, **why: Any) -> Verdict:
    """``verdicts.decide`` taking a request its credential hook never let out (``unsent``) for the row's
    own trouble: charged, as a request with no answer is."""
    if sent.answer.said is Said.UNSENT:  # MUTANT: was handed back uncharged, the auth gate's delay
        return verdicts._charged(claim, str(sent.answer), None, None, policy)
    return _DECIDE(claim, sent, policy, **why)


def handed_back_charged(
    claim: Claim,
    *,
    delay: float = 0.0,
    error: str | None = None,
    http_status: int | None = None,
    attempt: Attempt | None = None,
) -> Verdict:
    """``verdicts.handed_back`` charging the attempt it should give back."""
    return Verdict(
        claim.id,
        claim.epoch,
        Result.HANDED_BACK,
        charged=True,  # MUTANT: was False
        delay=delay,
        error=error,
        http_status=http_status,
        attempt=attempt,
    )


async def server_never_down(self: OutageWatch, sent_at: float) -> bool:
    """``OutageWatch.server_down`` that never finds the server down: no answer or a 5xx is always the
    row's own trouble, charged (an outage then kills rows)."""
    return False  # MUTANT: was a probe unless the server answered after sent_at


def budget_without_claimed(limit: int, window: BreakerWindow, want: int) -> int:
    """``gates.breaker_budget`` forgetting the rows claimed right now (deletes that may still happen)."""
    if window.tripped_reason is not None:
        return 0
    if not limit:
        return want
    return max(0, min(want, limit - window.total))  # MUTANT: was `limit - window.total - window.claimed`


def never_kept(self: MemoryStore, row: Row) -> bool:
    """``MemoryStore.is_kept`` reading no hold or pause (as a pause read once a minute would, for a minute)."""
    return False  # MUTANT


def refresh_swapping_through_the_configuration(self: ThrottledRefresh, configuration: Any) -> None:
    """``ThrottledRefresh.__call__`` as it was before issue 53's second bug was fixed: no lock, and the
    loader's fresh closure taken back from the configuration itself. Two request threads due at once can
    leave the throttle as its own hook (the second reads the attribute after the first put the throttle
    back), after which the loader's hook never runs again: the token expires, every request a 401."""
    now = self._clock()
    if now < self._due:
        return
    self._due = now + self._every
    self._hook(configuration)
    if configuration.refresh_api_key_hook is not self:  # MUTANT: the swap unguarded, through the configuration
        self._hook = configuration.refresh_api_key_hook
        configuration.refresh_api_key_hook = self


def add_one_claim_per_row(self: Pipeline, claims: list[Claim], lease_deadline: float) -> None:
    """``Pipeline.add`` as it was before the simulator found it: one claim in hand per row, a newer claim
    of a row replacing the older one whose verdict still waits to be written."""
    for claim in claims:
        for key in [key for key in self._inflight if key[0] == claim.id]:  # MUTANT: keyed by row alone
            del self._inflight[key]
        self._inflight[(claim.id, claim.epoch)] = claim
        self._queue.put_nowait(Work(claim, lease_deadline))


async def pass_once_by_the_wall_clock(self: Confirmer) -> int:
    """``Confirmer.pass_once`` as it was before the simulator's clock jumps: a pod judged stuck (and
    forced, its node gone) by this replica's wall clock against the row's ``done_at``, not by the age the
    database gives. The replica's ``datetime.now(UTC)`` is its host's (``SimKube.wall_now`` in the
    simulator: the database's time and the replica's skew)."""
    wall_now: Callable[[], datetime] = getattr(self.kube, "wall_now", lambda: datetime.now(UTC))
    if not self.outage.open:
        return 0
    rows = await self.rows.take_due(batch=BATCH, recheck_seconds=RECHECK_SECONDS)
    if not rows:
        return 0
    ids, gone, stuck = [], [], []
    timeout = self.settings.request_timeout
    for row in rows:
        sent = self._timer()
        try:
            state = await asyncio.to_thread(self.kube.pod_state, row.pod_namespace, row.pod_name, timeout=timeout)
        except KubeError as exc:
            if exc.answer.needs_probe and await self.outage.server_down(sent):
                break
            continue
        self.outage.answered(sent)
        uid = row.pod_uid
        still_there = state is not None and state.uid == uid
        # MUTANT: was `row.age_seconds > ...`, the database's clock
        overdue = (wall_now() - row.done_at).total_seconds() > self.settings.stuck_terminating_seconds
        ids.append(row.id)
        gone.append(not still_there)
        stuck.append(still_there and overdue)
        if not still_there:
            continue
        if overdue and self.settings.force_stuck and state is not None and state.node_name:
            await self._force_if_node_gone(row.pod_namespace, row.pod_name, uid, state.node_name)
    if ids:
        await self.rows.record(ids=ids, gone=gone, stuck=stuck)
    return len(rows)


async def force_whatever_the_node(self: Confirmer, namespace: str, name: str, uid: str, node: str) -> None:
    """``Confirmer._force_if_node_gone`` with the node's lookup dropped: a stuck pod forced while its
    kubelet may still finish it."""
    if self.scope.refuses(namespace) is not None:
        return
    try:  # MUTANT: was a return while `self.kube.node_exists(node)`
        await asyncio.to_thread(self.kube.force_delete, namespace, name, uid, timeout=self.settings.request_timeout)
    except KubeError:
        return


async def never_forcing(self: Confirmer, namespace: str, name: str, uid: str, node: str) -> None:
    """``Confirmer._force_if_node_gone`` that never forces: a pod on a vanished node stays stuck for ever."""
    return  # MUTANT


async def surge_looked_at_once_a_minute(self: SurgeWatch) -> None:
    """``SurgeWatch.run`` looking at the arrivals once a minute, not every half second: a burst is claimed
    and swept before the watch judges it."""
    while True:
        if self.activity is not None:
            self.activity.clear()
        try:
            await self.step()
        except psycopg.Error as exc:
            self.quiet = False
            logger.warning("the breaker's surge watch failed: {error}", error=first_line(exc))
        await periodic.pause(60.0)  # MUTANT: SURGE_INTERVAL, whatever the last look found


async def surge_watch_ends_at_a_failure(self: SurgeWatch) -> None:
    """``SurgeWatch.run`` that ends, quietly, at the first failure of its database (a lost connection):
    the replica sweeps on with no watch, and a later burst goes unjudged by it."""
    while True:
        if self.activity is not None:
            self.activity.clear()
        try:
            await self.step()
        except psycopg.Error:
            return  # MUTANT: logged, and looked at again half a second later
        if self.quiet and self.activity is not None:
            await periodic.pause(0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.activity.wait(), QUIET_LOOK_SECONDS)
        else:
            await periodic.pause(SURGE_INTERVAL)


async def claim_past_a_tripped_breaker(self: claimer.Claimer, session: SweepSession, want: int) -> int:
    """``Claimer._breaker_budget`` that, with the surge and transaction rules alone (no per-minute
    ceiling), reads the breaker tripped and claims all the same (its workers hand the rows back)."""
    limit = self.settings.max_deletes_per_minute
    if not self.settings.breaker_on:
        return want
    if not limit:
        self.breaker.observe(await session.breaker_tripped())
        return want  # MUTANT: 0 while tripped
    return await _BREAKER_BUDGET(self, session, want)


_BREAKER_BUDGET = claimer.Claimer._breaker_budget


async def turn_without_the_guards_flush_check(
    self: claimer.Claimer, want: int, *, disarm: bool, arm: bool, polled: bool, gathering: bool
) -> claimer.Turn | None:
    """``Claimer._turn`` whose claim does not pass the replication guard's standbys: the rows are marked,
    and claimed whether or not the standbys have flushed the marks (a DELETE a failover could lose the
    retire of)."""
    guard = self.settings.guard_standbys
    if guard is not None:
        async with self.store.session() as session:
            await session.guard_mark()
    turn: claimer.Turn | None = None
    async with self.store.session() as session:
        try:
            async with session.transaction():
                want = await self._breaker_budget(session, want)
                if want > 0:
                    batch = await session.claim(
                        batch=want,
                        lease_seconds=self.settings.lease_seconds,
                        disarm=disarm,
                        at_claim=self._at_claim,
                        guard=None,  # MUTANT: was guard
                        transaction_rows=self.rules.transaction_rows,
                        gathering=gathering,
                    )
                    turn = claimer.Turn(batch)
                    if batch.taken < want:
                        gather = self.settings.gather_seconds if arm and batch.taken else 0.0
                        take_over = self._take_over or (polled and batch.taken > 0)
                        due, arming = await session.look_ahead(arm=arm and not gather, take_over=take_over)
                        turn = claimer.Turn(batch, due, arming, gather)
        except LargeTransaction as large:
            await self._keep_back(session, large)
            turn = claimer.Turn(ClaimedBatch([], [], {}), due=0.0)
    return turn


async def turn_without_the_transaction_rule(
    self: claimer.Claimer, want: int, *, disarm: bool, arm: bool, polled: bool, gathering: bool
) -> claimer.Turn | None:
    """``Claimer._turn`` whose claim does not apply the breaker's transaction rule: a large host transaction's
    rows are claimed and sent as any others, never kept back for the on-call
    (``no_delete_of_a_kept_transaction``)."""
    guard = self.settings.guard_standbys
    if guard is not None:
        async with self.store.session() as session:
            await session.guard_mark()
    turn: claimer.Turn | None = None
    async with self.store.session() as session:
        try:
            async with session.transaction():
                want = await self._breaker_budget(session, want)
                if want > 0:
                    batch = await session.claim(
                        batch=want,
                        lease_seconds=self.settings.lease_seconds,
                        disarm=disarm,
                        at_claim=self._at_claim,
                        guard=guard,
                        transaction_rows=0,  # MUTANT: was self.rules.transaction_rows
                        gathering=gathering,
                    )
                    turn = claimer.Turn(batch)
                    if batch.taken < want:
                        gather = self.settings.gather_seconds if arm and batch.taken else 0.0
                        take_over = self._take_over or (polled and batch.taken > 0)
                        due, arming = await session.look_ahead(arm=arm and not gather, take_over=take_over)
                        turn = claimer.Turn(batch, due, arming, gather)
        except LargeTransaction as large:
            await self._keep_back(session, large)
            turn = claimer.Turn(ClaimedBatch([], [], {}), due=0.0)
    return turn


async def sight_by_the_wall_clock(
    self: Reconciler, conn: Connection, started_at: datetime, pods: list[PodState], attachments: dict[int, Attachment]
) -> list[_Suspect]:
    """``Reconciler._sight`` judging a pod's age by the replica's wall clock, not the database's at the pass's
    start: a replica whose clock runs ahead finds a pod just created old enough, and a create whose execution
    row is not written yet a suspect (``the_reconciler_spares_the_young_and_the_active``, first at seed 53);
    one whose clock runs behind holds every orphan back by as much, minutes past the healed world's wait
    (``every_old_orphan_is_swept``, first at seed 9: the test's)."""
    now = cast(Any, self.kube).wall_now()  # MUTANT: started_at (the simulator's host clock: ReconcileKube.wall_now)
    return await _sight(self, conn, started_at, now, pods, attachments, (Generation.RETIRED, Generation.NO_ROW))


async def sight_the_active_too(
    self: Reconciler, conn: Connection, started_at: datetime, pods: list[PodState], attachments: dict[int, Attachment]
) -> list[_Suspect]:
    """``Reconciler._sight`` taking a pod of an active generation for a suspect as well (the tables' answer
    misread). The confirmation's fresh read still finds it active and forgets it: the sighting is the bug."""
    suspected = (Generation.RETIRED, Generation.NO_ROW, Generation.ACTIVE)  # MUTANT: RETIRED and NO_ROW
    return await _sight(self, conn, started_at, started_at, pods, attachments, suspected)


async def confirm_by_the_labels_type(
    self: Reconciler, conn: Connection, due: list[_Suspect], attachments: dict[int, Attachment]
) -> int:
    """``Reconciler._confirm`` comparing the fresh GET's generation label with the suspect's sandbox id (the
    two labels mixed up): never equal, so every due suspect is taken for a pod changed since, forgotten, and
    sighted again into a new quarantine for ever. No orphan is ever enqueued."""
    still: list[_Suspect] = []
    changed: list[str] = []
    for suspect in due:
        pod = suspect.pod
        try:
            fresh = await asyncio.to_thread(
                self.kube.pod_state, self.namespace, pod.name, timeout=self.settings.request_timeout
            )
        except KubeError:
            continue
        if (
            fresh is None
            or fresh.uid != pod.uid
            or fresh.deleting
            or fresh.labels.get(self.sandbox_label) != suspect.sandbox_id
            or fresh.labels.get(self.generation_label) != suspect.sandbox_id  # MUTANT: pod.labels.get(the same)
        ):
            changed.append(pod.uid)
        else:
            still.append(suspect)
    async with conn.transaction():
        if still:
            states = await generations(conn, [(s.sandbox_id, s.generation) for s in still], attachments)
            verdicts = zip(still, states, strict=True)
            confirmed = [s for s, (state, _) in verdicts if state in (Generation.RETIRED, Generation.NO_ROW)]
            kept = {s.pod.uid for s in confirmed}
            changed += [s.pod.uid for s in still if s.pod.uid not in kept]
        else:
            confirmed = []
        if changed:
            await quarantine.forget(conn, changed, cluster=self.settings.cluster)
        if not confirmed:
            return 0
        return await quarantine.enqueue(conn, [s.pod.uid for s in confirmed], cluster=self.settings.cluster)


async def _sight(
    self: Reconciler,
    conn: Connection,
    started_at: datetime,
    now: datetime,
    pods: list[PodState],
    attachments: dict[int, Attachment],
    suspected: tuple[Generation, ...],
) -> list[_Suspect]:
    """``Reconciler._sight``'s body, with the age judged against ``now`` and ``suspected`` the states taken
    for suspects."""
    keyed = [(pod, key) for pod in pods if (key := self._key(pod, now)) is not None]
    async with conn.transaction():
        states = await generations(conn, [key for _, key in keyed], attachments)
        suspects = [
            _Suspect(pod, key[0], key[1], attachment_id, state)
            for (pod, key), (state, attachment_id) in zip(keyed, states, strict=True)
            if state in suspected and attachment_id is not None
        ]
        suspect_uids = {s.pod.uid for s in suspects}
        cleared = [pod.uid for pod in pods if pod.uid not in suspect_uids]
        if cleared:
            await quarantine.forget(conn, cleared, cluster=self.settings.cluster)
        if not suspects:
            return []
        sightings = [
            quarantine.Sighting(
                s.pod.uid,
                s.pod.namespace or self.namespace,
                s.pod.name,
                s.sandbox_id,
                s.generation,
                s.attachment_id,
                s.why.value,
            )
            for s in suspects
        ]
        due = await quarantine.sight(
            conn,
            sightings,
            started_at=started_at,
            quarantine=self.settings.reconcile_quarantine,
            cluster=self.settings.cluster,
        )
    return [s for s in suspects if s.pod.uid in due]


@dataclass(frozen=True)
class Mutant:
    target: Any
    attribute: str
    replacement: Any
    caught_by: str  # the invariant that should catch it


MUTANTS: dict[str, Mutant] = {
    "uid_dropped": Mutant(Sender, "_send", send_without_uid, inv.UID_PRECONDITION),
    "fence_dropped": Mutant(MemorySession, "_record", record_without_fence, inv.NO_RECORD_OVER_NEWER),
    "claim_cancelled_at_stop": Mutant(Sweeper, "drain", drain_cancelling_the_claim, inv.STOP_HANDS_BACK),
    "handed_back_charged": Mutant(verdicts, "handed_back", handed_back_charged, inv.NO_CHARGE_UNSENT),
    "unsent_charged": Mutant(verdicts, "decide", decide_charging_the_unsent, inv.NO_CHARGE_UNSENT),
    "outage_ignored": Mutant(OutageWatch, "server_down", server_never_down, inv.OUTAGE_CHARGES_NOTHING),
    "sent_stamped_before_the_hook": Mutant(Sender, "_send", send_stamped_before_the_hook, inv.OUTAGE_CHARGES_NOTHING),
    "keeping_ignored": Mutant(MemoryStore, "is_kept", never_kept, inv.KEPT_NEVER_SENT),
    "budget_ignores_claimed": Mutant(claimer, "breaker_budget", budget_without_claimed, inv.BREAKER_BOUND),
    "one_claim_per_row": Mutant(Pipeline, "add", add_one_claim_per_row, inv.NO_CLAIM_DROPPED),
    "refresh_swap_unguarded": Mutant(
        ThrottledRefresh, "__call__", refresh_swapping_through_the_configuration, inv.CREDENTIAL_RENEWED
    ),
    "stuck_by_the_wall_clock": Mutant(Confirmer, "pass_once", pass_once_by_the_wall_clock, inv.STUCK_BY_THE_DATABASE),
    "force_whatever_the_node": Mutant(
        Confirmer, "_force_if_node_gone", force_whatever_the_node, inv.FORCED_ONLY_NODE_GONE
    ),
    "never_forcing": Mutant(Confirmer, "_force_if_node_gone", never_forcing, inv.TERMINATING_SETTLED),
    "grace_not_confirmed": Mutant(verdicts, "decide", decide_without_confirming, inv.TERMINATING_SETTLED),
    "surge_looked_at_once_a_minute": Mutant(SurgeWatch, "run", surge_looked_at_once_a_minute, inv.SURGE_TRIPS),
    "surge_watch_ends_at_a_failure": Mutant(SurgeWatch, "run", surge_watch_ends_at_a_failure, inv.SURGE_TRIPS),
    "claim_past_a_tripped_breaker": Mutant(
        claimer.Claimer, "_breaker_budget", claim_past_a_tripped_breaker, inv.NO_CLAIM_PAST_TRIPPED
    ),
    "guard_flush_check_skipped": Mutant(
        claimer.Claimer, "_turn", turn_without_the_guards_flush_check, inv.GUARD_FLUSHED
    ),
    "transaction_rule_dropped": Mutant(
        claimer.Claimer, "_turn", turn_without_the_transaction_rule, inv.KEPT_TRANSACTION
    ),
    "reconcile_age_by_the_wall_clock": Mutant(Reconciler, "_sight", sight_by_the_wall_clock, inv.ORPHANS_SWEPT),
    "reconcile_active_suspected": Mutant(Reconciler, "_sight", sight_the_active_too, inv.RECONCILE_SPARES),
    "reconcile_generation_label_misread": Mutant(Reconciler, "_confirm", confirm_by_the_labels_type, inv.ORPHANS_SWEPT),
}


@contextlib.contextmanager
def applied(name: str) -> Iterator[Mutant]:
    """The mutant in place for the block (the command's way; the tests use ``monkeypatch``)."""
    mutant = MUTANTS[name]
    original = getattr(mutant.target, mutant.attribute)
    setattr(mutant.target, mutant.attribute, mutant.replacement)
    try:
        yield mutant
    finally:
        setattr(mutant.target, mutant.attribute, original)
