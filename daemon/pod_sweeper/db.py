"""Database connections: one place that opens them with the session settings the invariants need.

Every session sets ``idle_in_transaction_session_timeout`` (a frozen replica cannot hold row locks for
long) and TCP keepalives plus ``tcp_user_timeout`` (a partitioned replica's session is noticed and
closed by both ends). The settings go in with ``SET`` after connecting rather than as startup options,
because PgBouncer rejects unknown startup parameters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from pod_sweeper.errors import DatabaseUnavailable
from pod_sweeper.settings import Settings, redact_conninfo

Connection = AsyncConnection[DictRow]

# A daemon transaction is a few statements long; 15 s idle inside one means the process is frozen.
IDLE_IN_TRANSACTION_TIMEOUT_MS = 15_000


def connect_kwargs(settings: Settings, application_name: str = "pod-sweeper") -> dict[str, Any]:
    """libpq parameters added to the configured URL."""
    return {
        "connect_timeout": settings.connect_timeout,
        "application_name": application_name,
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": 20_000,
    }


async def configure_session(conn: AsyncConnection[Any]) -> None:
    """Session settings every pod-sweeper connection carries."""
    await conn.execute(
        "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
        (str(IDLE_IN_TRANSACTION_TIMEOUT_MS),),
    )
    if not conn.autocommit:
        await conn.commit()


def describe_connect_error(conninfo: str, exc: BaseException) -> str:
    """One line: where we tried to connect (password masked) and libpq's first line of reason."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"cannot connect to the database ({redact_conninfo(conninfo)}): {first}"


async def connect(settings: Settings, *, autocommit: bool = True, application_name: str = "pod-sweeper") -> Connection:
    """A configured connection; raises DatabaseUnavailable with one line when it cannot be had."""
    conninfo = settings.require_database_url()
    try:
        conn = await AsyncConnection.connect(
            conninfo, autocommit=autocommit, row_factory=dict_row, **connect_kwargs(settings, application_name)
        )
    except psycopg.Error as exc:
        raise DatabaseUnavailable(describe_connect_error(conninfo, exc)) from exc
    await configure_session(conn)
    return conn


@asynccontextmanager
async def connection(settings: Settings, *, autocommit: bool = True) -> AsyncIterator[Connection]:
    """``connect`` as an async context manager that always closes."""
    conn = await connect(settings, autocommit=autocommit)
    try:
        yield conn
    finally:
        await conn.close()


def make_pool(settings: Settings, *, max_size: int, name: str = "pod-sweeper") -> AsyncConnectionPool[Connection]:
    """An unopened pool of configured connections; the caller opens it with a timeout."""
    conninfo = settings.require_database_url()
    return AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True, "row_factory": dict_row, **connect_kwargs(settings, name)},
        configure=configure_session,
        connection_class=AsyncConnection[DictRow],
        open=False,
        name=name,
    )
