"""The schema watch, a side loop of every replica: the schema ledger read again every
SCHEMA_WATCH_SECONDS, not only at start, because a newer release's ``migrate`` may run beside this
replica. A newer schema that declares this release readable is a log line and a gauge; one this release
may not run on closes the ``SchemaGate`` (no claim is made) and says so; a fit one opens it again. Each
look also counts the attached tables that feed this replica's cluster (a gauge)."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from loguru import logger
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.core import periodic
from pod_sweeper.core.errors import SchemaError
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.store.admin import attach
from pod_sweeper.store.db import Connection
from pod_sweeper.store.schema import migrations
from pod_sweeper.tasks.rules.gates import SchemaGate

SCHEMA_WATCH_SECONDS = 30.0  # how often a running replica reads the schema ledger again


async def count_attached(conn: Connection, settings: Settings, metrics: Metrics, *, at_start: bool = False) -> None:
    """How many attached tables feed this replica's cluster, in a gauge; none is said at start, as an
    install half done (docs/operations.md: every install path ends with `attach`)."""
    tables = await attach.feeding(conn, cluster=settings.cluster)
    metrics.attached_tables.set(len(tables))
    if at_start and not tables:
        logger.error(
            "no table is attached for cluster {cluster}: no retire reaches the outbox and nothing will be"
            " swept; run `pod-sweeper attach --table SCHEMA.TABLE` as the schema's owner",
            cluster=settings.cluster,
        )


class SchemaWatch:
    """Owns the ``SchemaGate``'s observations and ``pod_sweeper_schema_version``; ``said`` hears why the
    schema is one this replica may not run on (None: it may), for readiness."""

    def __init__(
        self,
        settings: Settings,
        pool: AsyncConnectionPool[Connection],
        metrics: Metrics,
        gate: SchemaGate,
        said: Callable[[str | None], None],
    ) -> None:
        self.settings, self.pool, self.metrics, self.gate, self.said = settings, pool, metrics, gate, said
        self.known = migrations.expected_version()
        self.seen = self.known

    async def run(self) -> None:
        self.metrics.schema_version.labels("replica").set(self.known)
        await periodic.every(lambda: SCHEMA_WATCH_SECONDS, "schema watch", self.look, expected=(psycopg.Error,))

    async def look(self) -> None:
        # The ledger and the attached tables read in one transaction: one commit a look.
        try:
            async with self.pool.connection() as conn, conn.transaction():
                version = await migrations.check_schema(conn)
                await count_attached(conn, self.settings, self.metrics)
        except SchemaError as exc:
            if self.gate.open:
                logger.error("no longer claiming: {error}", error=str(exc))
            self.gate.observe(str(exc))
            self.said(str(exc))
            return
        if not self.gate.open:
            logger.info("the schema is one this replica may run on again (version {v}): claiming", v=version)
        self.gate.observe(None)
        self.said(None)
        self.metrics.schema_version.labels("database").set(version)
        if version != self.seen and version > self.known:
            logger.info(
                "the database's schema is at {v}, newer than this replica's {known}, and declares it may run"
                " on it: running on (upgrade it when you can)",
                v=version,
                known=self.known,
            )
        self.seen = version
