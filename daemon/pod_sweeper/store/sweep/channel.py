"""A cluster's NOTIFY channel: the wakeup the sweepers listen on, and the NOTIFY that wakes them (the
channel's name is ``queries``')."""

from __future__ import annotations

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection


async def notify(conn: Connection, payload: str = "", *, cluster: str) -> None:
    """NOTIFY the cluster's channel: wakes its listening sweepers (``payload`` tells a listener's own ping)."""
    await conn.execute(queries.load("notify"), queries.notify_params(payload, cluster=cluster))


async def listen(conn: Connection, *, cluster: str) -> None:
    """LISTEN on the cluster's channel (this connection must then stay this session's: not through a pooler)."""
    await conn.execute(queries.listen(cluster=cluster))
