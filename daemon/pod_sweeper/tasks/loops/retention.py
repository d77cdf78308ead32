"""Retention, a side loop of every replica: once a minute, done rows older than
``POD_SWEEPER_RETENTION`` are deleted a batch at a time (one replica at a time: the prune lock,
store/sweep/retention.py), then stale outage reports, the audit trail past
``POD_SWEEPER_AUDIT_RETENTION`` and the large host transactions an on-call ended before the retention.
A pass never holds one of the pool's connections longer than a batch."""

from __future__ import annotations

import psycopg
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import periodic
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.store.admin import controls
from pod_sweeper.store.db import Connection
from pod_sweeper.store.sweep import outages, retention

RETENTION_INTERVAL_SECONDS = 60.0
RETENTION_BATCH = 1000
RETENTION_PAUSE_SECONDS = 0.1  # between batches: lets the claims and the records through


class Retention:
    """The retention pass, every RETENTION_INTERVAL_SECONDS. Owns ``pod_sweeper_pruned_total``'s count."""

    def __init__(self, settings: Settings, pool: AsyncConnectionPool[Connection], metrics: Metrics) -> None:
        self.settings, self.pool, self.metrics = settings, pool, metrics

    async def run(self) -> None:
        await periodic.every(
            lambda: RETENTION_INTERVAL_SECONDS, "retention pass", self.prune, expected=(psycopg.Error,)
        )

    async def prune(self) -> None:
        keep_seconds = self.settings.retention.total_seconds()
        # A connection per batch, given back during the pause between batches: the pass never holds
        # one of the pool's connections (sized in tasks/process/runner.py's pool_size) for longer than
        # a batch's statement.
        while True:
            async with self.pool.connection() as conn:
                deleted = await retention.prune_batch(conn, retention_seconds=keep_seconds, batch=RETENTION_BATCH)
            self.metrics.pruned.inc(deleted or 0)
            if deleted is None or deleted < RETENTION_BATCH:
                break
            await periodic.pause(RETENTION_PAUSE_SECONDS)
        async with self.pool.connection() as conn:
            await outages.prune_outages(conn)
            await controls.prune_audit(conn, keep_seconds=self.settings.audit_retention.total_seconds())
            await controls.prune_large_transactions(conn, keep_seconds=keep_seconds)
