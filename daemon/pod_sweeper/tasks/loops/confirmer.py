"""Confirmed deletion: a DELETE answered with a grace period leaves the pod terminating, so once the
grace has passed the pod is looked at again. Gone (or replaced under its name): confirmed. Still there
with its UID past ``POD_SWEEPER_STUCK_TERMINATING_SECONDS``: reported stuck (log, metric, status), and
force-deleted only when ``POD_SWEEPER_FORCE_STUCK`` is set and the pod's node is gone, still under the
UID precondition. Rows are taken with SKIP LOCKED by moving their ``confirm_after`` forward, so any
number of replicas can share the work; an uncertain answer just waits for the next look. Nothing is
looked at while the API server cannot be reached (the outage watch), and a look that gets no answer
asks the watch before the pass goes on.

Whether a pod is stuck is judged by the database's clock: the row's age since its DELETE was recorded
(``done_at``) comes with it from the database (sql/confirm_claim.sql), never from this replica's wall
clock, which may run ahead of the database's or jump, and would then call a pod stuck early and force it
(the simulator's ``stuck_only_by_the_databases_clock``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import periodic
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.kube.answer import Said
from pod_sweeper.kube.errors import KubeError
from pod_sweeper.kube.interface import PodKube
from pod_sweeper.kube.scope import NamespaceScope
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep.terminating import PoolRows, TerminatingRows
from pod_sweeper.tasks.loops.outage import OutageWatch

BATCH = 50
RECHECK_SECONDS = 30.0  # how long a looked-at, still-terminating pod waits for the next look


class Confirmer:
    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Connection],
        kube: PodKube,
        metrics: Metrics,
        outage: OutageWatch,
        *,
        rows: TerminatingRows | None = None,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.pool, self.kube, self.metrics, self.outage = settings, pool, kube, metrics, outage
        # Two seams, which the simulator (tests/sim) drives: ``rows``, the two statements (over ``pool``
        # unless given); ``timer``, the requests' timings, on the outage watch's clock (time.monotonic).
        self.rows = rows if rows is not None else PoolRows(pool, settings.cluster)
        self._timer = timer
        self.interval = min(settings.poll_interval, 5.0)
        self.scope = NamespaceScope(settings.namespaces)

    async def run(self) -> None:
        await periodic.every(lambda: self.interval, "confirmation pass", self._passes, expected=(psycopg.Error,))

    async def _passes(self) -> None:
        while await self.pass_once() == BATCH:  # a full batch: more may be due
            pass

    async def pass_once(self) -> int:
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
                    break  # the rest of the batch comes back after RECHECK_SECONDS, like this one
                logger.info(
                    "confirming {ns}/{pod} must wait: {error}",
                    ns=row.pod_namespace,
                    pod=row.pod_name,
                    error=str(exc),
                )
                continue
            self.outage.answered(sent)
            uid = row.pod_uid
            still_there = state is not None and state.uid == uid
            overdue = row.age_seconds > self.settings.stuck_terminating_seconds  # the database's clock
            ids.append(row.id)
            gone.append(not still_there)
            stuck.append(still_there and overdue)
            if not still_there:
                self.metrics.confirmed.inc()
                continue
            if overdue and row.stuck_at is None:
                self.metrics.stuck.inc()
                logger.error(
                    "pod {ns}/{pod} (uid {uid}) is still terminating {s:.0f} s after its DELETE",
                    ns=row.pod_namespace,
                    pod=row.pod_name,
                    uid=uid,
                    s=row.age_seconds,
                )
            if overdue and self.settings.force_stuck and state is not None and state.node_name:
                await self._force_if_node_gone(row.pod_namespace, row.pod_name, uid, state.node_name)
        if ids:
            await self.rows.record(ids=ids, gone=gone, stuck=stuck)
        return len(rows)

    async def _force_if_node_gone(self, namespace: str, name: str, uid: str, node: str) -> None:
        timeout = self.settings.request_timeout
        # The scope holds for every DELETE, this one too: a row deleted before the scope narrowed
        # (a restart with other settings) is reported stuck, never forced outside it.
        if (why := self.scope.refuses(namespace)) is not None:
            logger.warning("not force-deleting {ns}/{pod}: {why}", ns=namespace, pod=name, why=why)
            return
        try:
            if await asyncio.to_thread(self.kube.node_exists, node, timeout=timeout):
                return  # its kubelet may still finish it: never force
            started = self._timer()
            answer = await asyncio.to_thread(self.kube.force_delete, namespace, name, uid, timeout=timeout)
        except KubeError as exc:
            if exc.answer.said not in (Said.NOT_FOUND, Said.CONFLICT):
                logger.warning("force-deleting {ns}/{pod} must wait: {error}", ns=namespace, pod=name, error=str(exc))
                return
            # Gone (PodGC removes a vanished node's pods after its quarantine) or another pod holds the
            # name: nothing to force, and the next look confirms it.
            logger.info("stuck pod {ns}/{pod} is already gone; nothing to force", ns=namespace, pod=name)
            return
        self.metrics.forced.inc()
        logger.warning(
            "force-deleted stuck pod {ns}/{pod} (uid {uid}): node {node} is gone; answer {status} in {ms:.0f} ms",
            ns=namespace,
            pod=name,
            uid=uid,
            node=node,
            status=answer.status,
            ms=(self._timer() - started) * 1000,
        )
