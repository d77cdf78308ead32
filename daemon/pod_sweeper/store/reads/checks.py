"""What ``pod-sweeper check`` reads of the outbox: the namespaces its rows aim at, whose permissions it
then asks the API server about."""

from __future__ import annotations

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection


async def namespaces(conn: Connection, *, cluster: str) -> list[str]:
    """The namespaces of the cluster's open rows and of its rows done in the last hour (at most 50), for
    ``check``."""
    rows = await (await conn.execute(queries.load("check_namespaces"), {"cluster": cluster})).fetchall()
    return [r["pod_namespace"] for r in rows]
