"""Database connections: one place that opens them, safe both direct and behind a transaction pooler.

A transaction pooler (PgBouncer in ``pool_mode = transaction``, RDS Proxy, pgcat, Supavisor) hands each
*transaction* to whichever server connection is free, so with ``transaction_pooler`` set nothing of
ours outlives a transaction: the one setting every transaction carries,
``idle_in_transaction_session_timeout`` (a frozen replica cannot hold row locks for long), is scoped to
each outermost transaction by :class:`PoolerConnection` itself (no caller can forget it), and psycopg
prepares no server-side statement (another client could run ours, or we theirs, under the same
``_pg3_N`` name). Reached directly, a connection is ours alone: the setting is made once when it opens
and the daemon's pool prepares its claim and record (planning them each run cost a quarter of the SQL
path's throughput, and scoping the setting per transaction about 0.4 ms of every woken claim:
bench/README.md). One-shot commands never prepare. No lock anywhere is session-level, pooler or not
(``migrate`` and the breaker use transaction-scoped advisory locks, the reconciliation pass a lease
row). TCP keepalives and ``tcp_user_timeout`` are libpq parameters: they act on our own socket,
whatever is at the other end. The LISTEN connection is the one connection that needs a session (see
``tasks.loops.listener``): with a pooler it takes ``listen_database_url`` or does not run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import AsyncConnection, AsyncTransaction
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row

from pod_sweeper.core.errors import DatabaseUnavailable, connection_failure
from pod_sweeper.core.settings import Settings, redact_conninfo

if TYPE_CHECKING:  # the pool is the daemon's; a one-shot command does not import it
    from psycopg_pool import AsyncConnectionPool

# A daemon transaction is a few statements long; 15 s idle inside one means the process is frozen.
IDLE_IN_TRANSACTION_TIMEOUT_MS = 15_000


class Connection(AsyncConnection[DictRow]):
    """A connection of pod-sweeper's. Reached directly (or through a session pooler) it is ours alone,
    so its settings are set once, when it is opened (:func:`configure`)."""


class PoolerConnection(Connection):
    """A connection through a transaction pooler: its every outermost transaction starts by scoping
    pod-sweeper's settings to itself, since the server connection behind it changes between
    transactions. Nested blocks are savepoints of a transaction that already has them."""

    @asynccontextmanager
    async def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> AsyncIterator[AsyncTransaction]:
        outermost = self.info.transaction_status == TransactionStatus.IDLE
        async with super().transaction(savepoint_name, force_rollback) as tx:
            if outermost:
                await self.execute(_SET_IDLE_TIMEOUT, (str(IDLE_IN_TRANSACTION_TIMEOUT_MS), True))
            yield tx


_SET_IDLE_TIMEOUT = "SELECT set_config('idle_in_transaction_session_timeout', %s, %s)"


async def configure(conn: AsyncConnection[Any]) -> None:
    """A direct connection's settings, for its whole session (one round trip when it opens, none per
    transaction: scoping it per transaction cost about 0.4 ms of every woken claim)."""
    if not isinstance(conn, PoolerConnection):
        await conn.execute(_SET_IDLE_TIMEOUT, (str(IDLE_IN_TRANSACTION_TIMEOUT_MS), False))
        if not conn.autocommit:
            await conn.commit()


def connection_class(settings: Settings) -> type[Connection]:
    return PoolerConnection if settings.transaction_pooler else Connection


def connect_kwargs(
    settings: Settings, application_name: str = "pod-sweeper", *, prepare: bool = False
) -> dict[str, Any]:
    """libpq and psycopg parameters added to the configured URL. ``prepare``: let psycopg prepare
    statements it runs often (the daemon's pool, when no transaction pooler is in the way)."""
    return {
        "connect_timeout": settings.connect_timeout,
        "application_name": application_name,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": 20_000,
        # Server-side prepared statements only where they pay and no transaction pooler can share or
        # drop them: the daemon's claim and record (planning them each time cost a quarter of the SQL
        # path's throughput, bench/README.md). A one-shot command gains nothing from them, so it never
        # prepares, and `migrate` through a pooler is safe even without the setting.
        "prepare_threshold": 5 if prepare and not settings.transaction_pooler else None,
    }


def describe_connect_error(conninfo: str, exc: BaseException) -> str:
    """One line: where we tried to connect (password masked) and the server's reason."""
    return f"cannot connect to the database ({redact_conninfo(conninfo)}): {connection_failure(exc)}"


async def connect(
    settings: Settings,
    *,
    autocommit: bool = True,
    application_name: str = "pod-sweeper",
    conninfo: str | None = None,
    prepare: bool = False,
) -> Connection:
    """A connection to ``conninfo`` (default: the database URL); raises DatabaseUnavailable with one
    line when it cannot be had."""
    conninfo = conninfo or settings.require_database_url()
    try:
        conn = await connection_class(settings).connect(
            conninfo,
            autocommit=autocommit,
            row_factory=dict_row,
            **connect_kwargs(settings, application_name, prepare=prepare),
        )
    except psycopg.Error as exc:
        raise DatabaseUnavailable(describe_connect_error(conninfo, exc)) from exc
    await configure(conn)
    return conn


@asynccontextmanager
async def connection(
    settings: Settings, *, autocommit: bool = True, prepare: bool = False
) -> AsyncIterator[Connection]:
    """``connect`` as an async context manager that always closes."""
    conn = await connect(settings, autocommit=autocommit, prepare=prepare)
    try:
        yield conn
    finally:
        await conn.close()


def make_pool(settings: Settings, *, max_size: int, name: str = "pod-sweeper") -> AsyncConnectionPool[Connection]:
    """An unopened pool; the caller opens it with a timeout."""
    from psycopg_pool import AsyncConnectionPool

    conninfo = settings.require_database_url()
    return AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True, "row_factory": dict_row, **connect_kwargs(settings, name, prepare=True)},
        connection_class=connection_class(settings),
        configure=configure,
        open=False,
        name=name,
    )
