"""A cluster's NOTIFY channel: the wakeup the sweepers listen on, the NOTIFY that wakes them, and a
replica's hand-on of its wakeups (the channel's name is ``queries``')."""

from __future__ import annotations

from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection

# What a NOTIFY on the channel says (its payload): an empty one wakes every listening replica; the
# enqueue's 'wake:REPLICA' (migration 0018) wakes the replica that armed the wakeup flag, and only it;
# a listener's own round trip is 'ping:...' (tasks/loops/listener.py), a wakeup of nobody.
WAKE_PREFIX = "wake:"
PING_PREFIX = "ping:"


def wakes(payload: str, *, replica: str) -> bool:
    """Whether a NOTIFY with ``payload`` is a wakeup for ``replica``."""
    if payload.startswith(WAKE_PREFIX):
        return payload == WAKE_PREFIX + replica
    return not payload.startswith(PING_PREFIX)


async def notify(conn: Connection, payload: str = "", *, cluster: str) -> None:
    """NOTIFY the cluster's channel: wakes its listening sweepers (``payload`` tells a listener's own ping)."""
    await conn.execute(queries.load("notify"), queries.notify_params(payload, cluster=cluster))


async def hand_on(conn: Connection, *, cluster: str, owner: str, always: bool) -> None:
    """The wakeup flag no longer names ``owner`` (retires wake every listening replica until another
    arms it), and one NOTIFY wakes them now: ``always`` (a replica that stops), or when it named
    ``owner`` (sql/wakeup_hand_on.sql)."""
    params = {"cluster": cluster, "owner": owner, "channel": queries.channel(cluster=cluster), "always": always}
    await conn.execute(queries.load("wakeup_hand_on"), params)


async def listen(conn: Connection, *, cluster: str) -> None:
    """LISTEN on the cluster's channel (this connection must then stay this session's: not through a pooler)."""
    await conn.execute(queries.listen(cluster=cluster))
