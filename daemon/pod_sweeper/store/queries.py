"""Owner of every SQL statement the daemon and the CLI run.

Statements live in ``sql/*.sql`` files, loaded by name, so that DBAs can read (and EXPLAIN) exactly
what runs; read-only queries meant for people live in ``sql/dba/``. Statements built from identifiers
(the attach mapping) are composed here too, always through ``psycopg.sql.Identifier``.
"""

from __future__ import annotations

import enum
from functools import cache
from pathlib import Path
from typing import LiteralString, cast

from psycopg import sql

from pod_sweeper.core.resources import resource_dir
from pod_sweeper.core.settings import DEFAULT_CLUSTER

# The NOTIFY channel (a contract name, docs/design.md): the enqueue NOTIFYs it, the listener LISTENs on it.
# The default cluster's; another cluster's is CHANNEL/NAME (channel(), and pod_sweeper.channel() in SQL).
CHANNEL = "pod_sweeper"


def channel(*, cluster: str) -> str:
    """A cluster's NOTIFY channel: a replica hears its own cluster's retires and no other's."""
    return CHANNEL if cluster == DEFAULT_CLUSTER else f"{CHANNEL}/{cluster}"


class Lock(enum.IntEnum):
    """The transaction-scoped advisory lock keys, each the bytes of a short word read as a bigint.
    ``WAKEUP``'s value is also written in the enqueue of migrations 0007 and 0009 (an applied migration
    cannot change); the migration tier checks that the enqueue the database runs takes this key
    (``test_the_live_enqueue_takes_the_wakeup_lock_the_sweeper_arms_with``)."""

    MIGRATION = 0x706F6473776570  # "podswep": one migration at a time
    PRUNE = 0x706F647072756E  # "podprun": one retention pass at a time
    WAKEUP = 0x706F6477616B6575  # "podwakeu": enqueues hold it shared, arming takes it exclusively


def notify_params(payload: str = "", *, cluster: str) -> dict[str, str]:
    """The parameters of ``sql/notify.sql``: the cluster's channel and ``payload``."""
    return {"channel": channel(cluster=cluster), "payload": payload}


def listen(*, cluster: str) -> sql.Composed:
    """``LISTEN`` on the cluster's channel (a name, so composed rather than parameterised)."""
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel(cluster=cluster)))


@cache
def load(name: str) -> sql.SQL:
    """The statement in ``sql/NAME.sql`` (``dba/NAME`` for the hand-run queries)."""
    return shipped_sql(resource_dir("sql") / f"{name}.sql")


def shipped_sql(path: Path) -> sql.SQL:
    """The statement(s) in a file that ships with pod-sweeper (a query or a migration).

    A file we ship is as trusted as a literal in the source: it holds no values, only SQL, so it may
    stand where psycopg asks for a ``LiteralString``."""
    text = cast(LiteralString, path.read_text(encoding="utf-8"))  # type: ignore[redundant-cast]
    return sql.SQL(text)


def for_parameterized(trusted: str) -> sql.SQL:
    """Quoted SQL text (a name, a type from ``format_type``) for a statement that carries ``%s`` parameters.

    psycopg looks for placeholders in the whole composed text, quoted names included, so a host table
    or column called ``50%`` would break the statement; doubling ``%`` here makes the server see one.
    Use it only where the statement is executed with parameters (without them ``%%`` stays ``%%``)."""
    return sql.SQL(cast(LiteralString, trusted.replace("%", "%%")))  # type: ignore[redundant-cast]


def name_in_parameterized(*parts: str) -> sql.SQL:
    """``sql.Identifier(*parts)``, safe in a statement that carries parameters (see above)."""
    return for_parameterized(sql.Identifier(*parts).as_string())


def dba_query_names() -> list[str]:
    """Names of the shipped read-only queries for DBAs and on-call."""
    return sorted(p.stem for p in (resource_dir("sql") / "dba").glob("*.sql"))
