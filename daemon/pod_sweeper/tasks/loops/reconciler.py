"""The reconciliation backstop: find the pods the outbox never heard of, and hand them to it.

The outbox covers every retire that commits after ``attach``. This pass covers the rest: pods retired
before pod-sweeper was installed, pods whose create died before it recorded the UID, pods whose
generation has no execution row at all. Every ``reconcile_interval`` one replica (the lease kept in
the one ``pod_sweeper.reconcile_state`` row, which also spaces the passes so that N replicas do not run
N of them) lists the pods carrying both configured labels, page by page with the real list API, and
looks each key (sandbox_id, generation) up in every attached table.

A pod no active row accounts for becomes a suspect (``pod_sweeper.suspects``), never a delete. Only a
suspect seen again on a later pass, at least ``reconcile_quarantine`` after it was first seen, is
confirmed, by a fresh GET (same UID, not terminating, same labels) and then a fresh database read, and
enqueued as an outbox row with reason ``reconciled`` and the UID it observed. From there the normal
pipeline (claim-time re-check, UID precondition, breaker, dry run) applies; the pass itself deletes
nothing. Pods younger than ``reconcile_min_age``, terminating pods, pods without the labels, pods of
active generations and pods whose labels do not fit the host's types are never suspects.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import periodic
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.kube.errors import KubeError
from pod_sweeper.kube.interface import PodKube, PodState
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep import quarantine
from pod_sweeper.store.sweep.recheck import Attachment, Generation, generations, load_attachments
from pod_sweeper.tasks.loops.outage import OutageWatch

_BIGINT = 2**63


@dataclass
class PassResult:
    """What one pass saw and did (also written to ``pod_sweeper.reconcile_state``)."""

    seen: int = 0
    suspects: int = 0  # suspects in quarantine after the pass, all replicas' sightings included
    enqueued: int = 0
    complete: bool = False  # every page listed: suspects not seen were forgotten
    error: str | None = None


@dataclass(frozen=True)
class _Suspect:
    pod: PodState
    sandbox_id: str
    generation: int
    attachment_id: int
    why: Generation


class Reconciler:
    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Connection],
        kube: PodKube,
        metrics: Metrics,
        outage: OutageWatch,
        *,
        timer: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        assert settings.reconcile_sandbox_label and settings.reconcile_generation_label
        assert settings.reconcile_namespace
        self.settings, self.pool, self.kube, self.metrics, self.outage = settings, pool, kube, metrics, outage
        # Two seams, which the simulator (tests/sim) drives: ``timer``, the list requests' timings, on the
        # outage watch's clock (time.monotonic); ``rng``, the passes' jitter (the module's unseeded one).
        self._timer = timer
        self._uniform: Callable[[float, float], float] = random.uniform if rng is None else rng.uniform
        self.sandbox_label = settings.reconcile_sandbox_label
        self.generation_label = settings.reconcile_generation_label
        self.namespace = settings.reconcile_namespace
        # Existence selectors: the API server returns only pods carrying both keys.
        self.selector = f"{self.sandbox_label},{self.generation_label}"

    async def run(self) -> None:
        """Pass after pass; a failed pass (database or API) is logged and the next one tries again."""
        # Jitter so that replicas started together do not contend for the lease on every tick.
        await periodic.every(
            lambda: self.settings.reconcile_interval * self._uniform(0.9, 1.1),
            "reconciliation pass",
            self.pass_once,
            expected=(psycopg.Error,),
        )

    async def pass_once(self) -> PassResult | None:
        """One pass, or None when another replica holds the lease, ran one less than half an interval
        ago, or the API server cannot be reached (the outage watch: the pass waits for the next tick)."""
        if not self.outage.open:
            return None
        async with self.pool.connection() as conn:
            return await self._pass(conn)

    async def _pass(self, conn: Connection) -> PassResult | None:
        interval = self.settings.reconcile_interval
        started_at = await quarantine.begin(
            conn, replica=self.settings.replica_id, gap=interval / 2, lease=interval, cluster=self.settings.cluster
        )
        if started_at is None:
            return None
        attachments = await load_attachments(conn)
        result = PassResult()
        token: str | None = None
        sent = self._timer()
        try:
            while True:
                sent = self._timer()
                page = await asyncio.to_thread(
                    self.kube.list_pods,
                    self.namespace,
                    self.selector,
                    limit=self.settings.reconcile_page_size,
                    continue_token=token,
                    timeout=self.settings.request_timeout,
                )
                result.seen += len(page.pods)
                due = await self._sight(conn, started_at, page.pods, attachments)
                if due:
                    result.enqueued += await self._confirm(conn, due, attachments)
                if not (token := page.continue_token):
                    break
            await quarantine.prune(conn, started_at=started_at, cluster=self.settings.cluster)
            result.complete = True
        except KubeError as exc:
            # An expired continue token (410) or an unreachable API: the pods not listed keep their
            # quarantine as it was, and the next pass starts from the first page. No answer at all is
            # the outage watch's to judge (it holds every task back while the server is down).
            if exc.answer.needs_probe:
                await self.outage.server_down(sent)
            result.error = f"listing pods in {self.namespace}: {exc}"[:500]
            logger.warning("reconciliation pass stopped early: {error}", error=result.error)
        result.suspects = await quarantine.finish(
            conn,
            replica=self.settings.replica_id,
            started_at=started_at,
            seen=result.seen,
            enqueued=result.enqueued,
            error=result.error,
            cluster=self.settings.cluster,
        )
        self.metrics.reconcile_passes.labels("complete" if result.complete else "partial").inc()
        self.metrics.reconcile_suspects.set(result.suspects)
        self.metrics.reconcile_enqueued.inc(result.enqueued)
        logger.info(
            "reconciliation pass: {seen} labelled pod(s) in {ns}, {suspects} suspect(s) in quarantine, "
            "{enqueued} enqueued{partial}",
            seen=result.seen,
            ns=self.namespace,
            suspects=result.suspects,
            enqueued=result.enqueued,
            partial="" if result.complete else " (incomplete)",
        )
        return result

    def _key(self, pod: PodState, now: datetime) -> tuple[str, int] | None:
        """The pod's (sandbox_id, generation) when the pass may look at it at all, else None; ``now`` is
        the database's, at the pass's start."""
        if pod.namespace and pod.namespace != self.namespace:
            return None
        sandbox_id, generation = pod.labels.get(self.sandbox_label), pod.labels.get(self.generation_label)
        if not sandbox_id or generation is None or pod.deleting or pod.created is None:
            return None  # unlabelled (a server that ignored the selector), terminating, or of unknown age
        try:
            uuid.UUID(pod.uid)
        except ValueError:
            return None
        if (now - pod.created).total_seconds() < self.settings.reconcile_min_age:
            return None
        try:
            value = int(generation)
        except ValueError:
            return None
        return (sandbox_id, value) if -_BIGINT <= value < _BIGINT else None

    async def _sight(
        self, conn: Connection, started_at: datetime, pods: list[PodState], attachments: dict[int, Attachment]
    ) -> list[_Suspect]:
        """Classify one page; record its suspects and forget the rest; return the suspects now due."""
        # A pod's age is measured against the database's clock at the pass's start (``started_at``), never
        # this replica's wall clock: one that ran ahead (skew, a jump) would find a pod just created old
        # enough, and a create whose execution row is not written yet a suspect.
        keyed = [(pod, key) for pod in pods if (key := self._key(pod, started_at)) is not None]
        async with conn.transaction():
            states = await generations(conn, [key for _, key in keyed], attachments)
            suspects = [
                _Suspect(pod, key[0], key[1], attachment_id, state)
                for (pod, key), (state, attachment_id) in zip(keyed, states, strict=True)
                if state in (Generation.RETIRED, Generation.NO_ROW) and attachment_id is not None
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

    async def _confirm(self, conn: Connection, due: list[_Suspect], attachments: dict[int, Attachment]) -> int:
        """Confirm each due suspect with a fresh GET, then a fresh database read, and enqueue it.

        The GET comes first so that the database read is the newer fact: a generation re-activated
        after the read is still caught by the claim-time re-check, which runs after this."""
        still: list[_Suspect] = []
        changed: list[str] = []
        for suspect in due:
            pod = suspect.pod
            try:
                fresh = await asyncio.to_thread(
                    self.kube.pod_state, self.namespace, pod.name, timeout=self.settings.request_timeout
                )
            except KubeError as exc:
                logger.info("confirming suspect {pod} must wait: {error}", pod=pod.name, error=str(exc))
                continue
            if (
                fresh is None
                or fresh.uid != pod.uid
                or fresh.deleting
                or fresh.labels.get(self.sandbox_label) != suspect.sandbox_id
                or fresh.labels.get(self.generation_label) != pod.labels.get(self.generation_label)
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
            enqueued = await quarantine.enqueue(conn, [s.pod.uid for s in confirmed], cluster=self.settings.cluster)
        for s in confirmed:
            logger.warning(
                "reconciled: pod {ns}/{pod} uid {uid} ({why}: sandbox {sandbox} generation {generation}) enqueued "
                "after its quarantine",
                ns=self.namespace,
                pod=s.pod.name,
                uid=s.pod.uid,
                why=s.why.value,
                sandbox=s.sandbox_id,
                generation=s.generation,
            )
        return enqueued
