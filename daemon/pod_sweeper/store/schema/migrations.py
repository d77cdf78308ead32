"""Forward-only schema migrations, and the schema check every long-running command starts with.

Each ``migrations/NNNN_name.sql`` is applied once, in its own transaction, and recorded with its
SHA-256 in ``pod_sweeper.schema_migrations``, under a transaction-scoped advisory lock, so two
``migrate`` runs at once (two replicas' init containers, say, even through a transaction pooler) apply
each file exactly once: the second waits, then finds nothing left to do. An applied file whose checksum
changed is a hard error: the database no longer matches the text anyone can read.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import psycopg
from loguru import logger

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.errors import MigrationError, MigrationLockTimeout, PrivilegeError, SchemaError, first_line
from pod_sweeper.core.resources import resource_dir
from pod_sweeper.core.settings import Settings
from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection

SCHEMA = "pod_sweeper"
LEDGER = "schema_migrations"
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_READABLE_RE = re.compile(r"^-- readable from: (\d{4})\b", re.MULTILINE)
_STEP_RE = re.compile(r"^-- step: (alone|in a transaction)\s*$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def filename(self) -> str:
        return f"{self.version:04d}_{self.name}.sql"

    @property
    def readable_from(self) -> int:
        """The oldest schema version whose pod-sweeper may run on a schema with this migration: the
        file's ``-- readable from: NNNN`` line (an expand step that older code does not notice), else its
        own version (only a release that ships it may)."""
        match = _READABLE_RE.search(self.text)
        return int(match[1]) if match else self.version

    @property
    def steps(self) -> list[tuple[bool, str]]:
        """A migration in steps: each ``-- step: alone`` (outside any transaction: CREATE INDEX
        CONCURRENTLY, a DO block that commits its batches) or ``-- step: in a transaction`` (with the
        lock timeout) line begins one. Empty: the whole file is one transaction."""
        steps: list[tuple[bool, str]] = []
        for line in self.text.splitlines(keepends=True):
            marker = _STEP_RE.match(line)
            if marker:
                steps.append((marker[1] == "alone", ""))
            elif steps:
                steps[-1] = (steps[-1][0], steps[-1][1] + line)
        return steps


# Migrations 0009-0011 were rewritten before any release shipped them, so that none holds a lock that
# stops the host's retires for longer than a moment: the claim index's build, the update of every done
# row and the constraint's validation moved to 0013, which runs them online. A database that applied an
# earlier text of them (a build of main) is accepted as it is: 0013 brings it to the same schema
# (tests/migration/test_migrate.py::test_a_database_that_ran_the_earlier_texts_ends_at_the_same_schema).
EARLIER_CHECKSUMS: dict[int, frozenset[str]] = {
    9: frozenset({"7cb46a4140de89d2283305ce37df1a953b856f198fed27e67ef65f2c5ab58967"}),
    10: frozenset({"c4aaf8cfc90ff8979dbbdd7871a28aead97d00d684a1376ed737c55d1b47ae6c"}),
    11: frozenset({"59ab935cf1caf5717f25bdbb79191e716384018e820f75e4e755b91af9fe014f"}),
}


@cache
def shipped() -> tuple[Migration, ...]:
    """The migrations that ship with this copy of pod-sweeper, in order."""
    found: list[Migration] = []
    for path in sorted(resource_dir("migrations").glob("*.sql")):
        match = _FILE_RE.match(path.name)
        if not match:
            raise MigrationError(f"migration file {path.name} is not named NNNN_name.sql")
        found.append(Migration(int(match[1]), match[2], path))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migration versions must run 1, 2, 3, ... without gaps; found {versions}")
    return tuple(found)


def expected_version() -> int:
    return len(shipped())


async def _ledger_exists(conn: Connection) -> bool:
    row = await (await conn.execute(queries.load("relation_exists"), {"name": f"{SCHEMA}.{LEDGER}"})).fetchone()
    return bool(row and row["present"])


async def _applied(conn: Connection) -> dict[int, str]:
    """The ledger's versions and checksums; empty when there is no ledger yet."""
    return await _read_ledger(conn) if await _ledger_exists(conn) else {}


async def _read_ledger(conn: Connection) -> dict[int, str]:
    return {version: checksum for version, (checksum, _) in (await _read_ledger_rows(conn)).items()}


async def _read_ledger_rows(conn: Connection) -> dict[int, tuple[str, int]]:
    """Each applied migration's checksum and the oldest schema version that may run on it."""
    cur = await conn.execute(queries.load("ledger_read"))
    return {r["version"]: (r["checksum"], r["readable_from"] or r["version"]) for r in await cur.fetchall()}


def too_new(applied: dict[int, tuple[str, int]]) -> str | None:
    """Why this release may not run on the schema, when a migration it does not ship (a newer release's)
    declares it too old; None when every such migration is an expand step it may run beside."""
    known = expected_version()
    needs = max((readable for version, (_, readable) in applied.items() if version > known), default=0)
    if needs <= known:
        return None
    return (
        f"the database's schema {SCHEMA} is at {max(applied):04d}, which needs a pod-sweeper that ships migration"
        f" {needs:04d} or later; this one ships {known:04d}: upgrade pod-sweeper"
    )


def _verify(applied: dict[int, str]) -> list[Migration]:
    """The migrations still to apply; raises if the database and the files disagree. A migration of a
    newer release is not this one's to check (``too_new`` says whether it may run beside it)."""
    by_version = {m.version: m for m in shipped()}
    for version, checksum in applied.items():
        migration = by_version.get(version)
        if migration is None:
            continue
        if checksum != migration.checksum and checksum not in EARLIER_CHECKSUMS.get(version, ()):
            raise MigrationError(
                f"migration {migration.filename} was edited after it was applied "
                f"(recorded sha256 {checksum[:12]}..., file {migration.checksum[:12]}...); "
                "restore the file and add a new migration instead"
            )
    return [m for m in shipped() if m.version not in applied]


# The default bound of each lock a migration waits for, and of the whole run's retries: the settings'
# (migrate_lock_timeout, migrate_deadline), which the CLI passes.
LOCK_TIMEOUT_SECONDS: float = Settings.model_fields["migrate_lock_timeout"].default
DEADLINE_SECONDS: float = Settings.model_fields["migrate_deadline"].default
_RETRY = Backoff(0.1, 10.0)
BUSY_POLL_SECONDS = 0.1  # how often a migrate looks whether another one has let the migration lock go
LEASE_SECONDS = 30.0  # a migration in steps whose runner renewed nothing for this long is taken over


# A second connection to the same database, as an async context manager (``db.connection`` bound to
# the settings): what holds the migration lock while a migration in steps runs outside a transaction.
SecondConnection = Callable[[], AbstractAsyncContextManager[Connection]]


@dataclass(frozen=True)
class LockHolder:
    """The oldest open transaction holding a lock on one of our tables: who to ask, or wait for."""

    pid: int
    application: str
    user: str
    state: str | None
    seconds: float | None  # how long its transaction has been open (None: not ours to see)
    relation: str
    mode: str

    def __str__(self) -> str:
        age = f"open {self.seconds:.0f} s" if self.seconds is not None else "open for a time this role cannot see"
        state = f", {self.state}" if self.state else ""
        application = self.application or "no application_name"
        return f"pid {self.pid} ({application}, user {self.user}, {age}{state}) holding {self.mode} on {self.relation}"


async def lock_holder(conn: Connection) -> LockHolder | None:
    """The oldest other transaction that holds a lock on a relation of our schema, or None."""
    row = await (await conn.execute(queries.load("lock_holders"))).fetchone()
    if row is None:
        return None
    return LockHolder(
        row["pid"],
        row["application_name"] or "",
        row["usename"] or "?",
        row["state"],
        row["seconds"],
        row["relation"],
        row["mode"],
    )


async def migrate(
    conn: Connection,
    *,
    dry_run: bool = False,
    lock_timeout: float = LOCK_TIMEOUT_SECONDS,
    deadline: float = DEADLINE_SECONDS,
    target: int | None = None,
    second: SecondConnection | None = None,
) -> list[Migration]:
    """Apply what is missing, up to ``target`` (default: every migration shipped), or with ``dry_run``
    only say what that would be.

    Each migration is one transaction that first takes a transaction-scoped advisory lock, then reads the
    ledger and applies the first migration still missing. Concurrent runs queue on the lock and each
    finds the ledger as the one before it left it, so every file is applied exactly once. No lock outlives
    its transaction, so this is safe through a transaction pooler too (a session lock there stays held by
    a server connection no client owns).

    The host's writers come first. Every lock a migration takes waits at most ``lock_timeout`` (a lock
    queued behind someone else's open transaction would queue every retire of the host behind it); a
    migration that cannot have its locks is rolled back and tried again after a growing pause, until
    ``deadline`` seconds have passed, then ``MigrationLockTimeout`` names the oldest transaction that
    held a lock on our tables. A migration in steps (``Migration.steps``: an index built CONCURRENTLY, a
    large update in batches) runs step by step under a lease, and is recorded once every step has run;
    ``second`` (a factory of a second connection to the same database) renews the lease meanwhile
    (without it, steps longer than ``LEASE_SECONDS`` may be taken over by another migrate)."""
    if dry_run:
        return [m for m in _verify(await _applied(conn)) if target is None or m.version <= target]
    await conn.set_autocommit(True)
    applied: list[Migration] = []
    started, tries = time.monotonic(), 0
    while True:
        try:
            migration, recorded = await _apply_next(
                conn, lock_timeout=lock_timeout, target=target, second=second, until=started + deadline
            )
        except _Busy:
            if time.monotonic() - started > deadline:
                raise MigrationLockTimeout(
                    f"migrate gave up after {deadline:g} s: another migrate held the migration lock all that time"
                    " (POD_SWEEPER_MIGRATE_DEADLINE); nothing was applied by this one"
                ) from None
            await asyncio.sleep(BUSY_POLL_SECONDS)
            continue
        except (psycopg.errors.LockNotAvailable, _OutOfTime) as exc:
            tries += 1
            holder = await lock_holder(conn)
            delay = _RETRY.delay(tries)
            elapsed = time.monotonic() - started
            pending = _verify(await _applied(conn))
            name = pending[0].filename if pending else "the ledger"
            if isinstance(exc, _OutOfTime) or elapsed + delay > deadline:
                raise MigrationLockTimeout(
                    f"migrate gave up after {elapsed:.0f} s and {tries} tries: {name} could not take its locks"
                    f" within {lock_timeout:g} s each time (POD_SWEEPER_MIGRATE_LOCK_TIMEOUT); "
                    + (
                        f"the oldest transaction holding a lock on our tables: {holder}"
                        if holder
                        else "no other transaction holds a lock on our tables now"
                    )
                    + "; nothing of it was applied, the host's writes went on meanwhile"
                ) from None
            logger.warning(
                "{name}: a lock was not free within {timeout:g} s ({holder}); rolled back, trying again in"
                " {delay:.1f} s",
                name=name,
                timeout=lock_timeout,
                holder=holder or "held by a transaction that has ended since",
                delay=delay,
            )
            await asyncio.sleep(delay)
            continue
        if migration is None:
            return applied
        if recorded:
            applied.append(migration)
        tries = 0


async def _apply_next(
    conn: Connection, *, lock_timeout: float, target: int | None, second: SecondConnection | None, until: float
) -> tuple[Migration | None, bool]:
    """Apply the first missing migration (up to ``target``): (it, whether this run recorded it), or
    (None, False) when none is missing."""
    timeout = {"timeout": f"{max(1, round(lock_timeout * 1000))}ms"}
    async with conn.transaction():
        await _migration_lock(conn)
        await conn.execute(queries.load("lock_timeout"), timeout)
        await conn.execute(queries.load("ledger_create"))
        rows = await _read_ledger_rows(conn)
        if (why := too_new(rows)) is not None:
            raise SchemaError(why)
        pending = [m for m in _verify({v: c for v, (c, _) in rows.items()}) if target is None or m.version <= target]
        if not pending:
            return None, False
        migration = pending[0]
        if not migration.steps:
            logger.info("applying migration {migration}", migration=migration.filename)
            await conn.execute(queries.shipped_sql(migration.path))
            await _record(conn, migration)
            return migration, True
        # A migration in steps runs outside any transaction (an index built CONCURRENTLY cannot run
        # in one; a large update commits batch by batch), so no transaction lock can guard it: a lease
        # row does (taken here, under the migration lock), renewed from a second connection while the
        # steps run. A transaction kept open for the purpose would keep a snapshot, which the
        # CONCURRENTLY build would wait for, for ever.
        holder = f"{socket.gethostname()}/{os.getpid()}/{id(conn):x}"
        lease = {"version": migration.version, "holder": holder}
        took = await conn.execute(queries.load("steps_lease_take"), {**lease, "lease_seconds": LEASE_SECONDS})
        if await took.fetchone() is None:
            raise _Busy
    renewing = asyncio.create_task(_renew(second, lease)) if second is not None else None
    try:
        return migration, await _apply_steps(conn, migration, timeout, until, lease)
    except BaseException:
        with contextlib.suppress(psycopg.Error):  # let the next migrate start again at once
            await conn.execute(queries.load("steps_lease_end"), lease)
        raise
    finally:
        if renewing is not None:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing


async def _renew(second: SecondConnection, lease: dict[str, object]) -> None:
    """Renew the steps' lease every third of its length, each time in a short transaction of its own."""
    async with second() as conn:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 3)
            await conn.execute(queries.load("steps_lease_renew"), lease)


class _Busy(Exception):
    """Another migrate holds the migration lock: try again in a moment, outside any transaction."""


async def _migration_lock(conn: Connection) -> None:
    """The migration lock, for the caller's transaction, or ``_Busy``. Never waited for inside a
    statement: a transaction waiting there keeps a snapshot, and an index built CONCURRENTLY by the
    migrate that holds the lock would wait for that snapshot in turn, for ever."""
    row = await (await conn.execute(queries.load("try_advisory_lock"), {"key": queries.Lock.MIGRATION})).fetchone()
    if not (row and row["mine"]):
        raise _Busy


class _OutOfTime(Exception):
    """A step run alone was still waiting at the migrate's deadline, and was cancelled."""


async def _alone(conn: Connection, text: str, until: float) -> None:
    """A step outside any transaction. It takes no lock that stops the host's writes (an index built
    or dropped CONCURRENTLY waits for older transactions instead, a DO block's batches commit on their
    own), so no lock timeout bounds it (none can be set outside a transaction without a session
    setting), only the migrate's deadline: past it the statement is cancelled on the server."""
    step = asyncio.ensure_future(conn.execute(queries.shipped_sql_text(text)))
    done, _ = await asyncio.wait({step}, timeout=max(0.0, until - time.monotonic()))
    if done:
        await step
        return
    await conn.cancel_safe()
    with contextlib.suppress(psycopg.errors.QueryCanceled):
        await step
    raise _OutOfTime


async def _apply_steps(
    conn: Connection, migration: Migration, timeout: dict[str, str], until: float, lease: dict[str, object]
) -> bool:
    """Run a migration in steps, each on its own (an index built CONCURRENTLY cannot run in a
    transaction; a large update commits batch by batch), then record it; False when it was recorded
    already (by another run, before this one held the lock). Its file is written so that running it
    again from the start after a failure is safe."""
    logger.info("applying migration {migration} in {n} steps", migration=migration.filename, n=len(migration.steps))
    for alone, text in migration.steps:
        if alone:
            await _alone(conn, text, until)
            continue
        async with conn.transaction():
            await conn.execute(queries.load("lock_timeout"), timeout)
            await conn.execute(queries.shipped_sql_text(text))
    while True:
        try:
            async with conn.transaction():
                await _migration_lock(conn)
                if migration.version in await _read_ledger(conn):
                    return False  # another migrate took over a lease it thought stale, and finished first
                await _record(conn, migration)
                await conn.execute(queries.load("steps_lease_end"), lease)
                return True
        except _Busy:
            await asyncio.sleep(BUSY_POLL_SECONDS)


async def _record(conn: Connection, migration: Migration) -> None:
    params = {
        "version": migration.version,
        "name": migration.name,
        "checksum": migration.checksum,
        "readable_from": migration.readable_from,
    }
    await conn.execute(queries.load("ledger_record"), params)


@contextlib.contextmanager
def privileges_of(conn: Connection) -> Iterator[None]:
    """A statement the role may not run, said as what to do about it: PrivilegeError naming the role
    and the ``grant`` that gives the runtime's privileges (run by the schema's owner)."""
    try:
        yield
    except psycopg.errors.InsufficientPrivilege as exc:
        role = conn.info.user
        raise PrivilegeError(
            f"role {role} lacks a privilege on schema {SCHEMA} ({first_line(exc)}): as the schema's owner, run"
            f" `pod-sweeper grant {role} --apply`"
        ) from None


async def check_schema(conn: Connection) -> int:
    """The database's schema version, if this pod-sweeper may run on it: every migration it ships
    applied, and any newer one an expand step that declares this release readable (the N / N+1 window:
    ``migrate`` runs before the new replicas, and the previous image can run after it). Raises
    SchemaError for a schema that is behind, or one a newer release declared this one too old for."""
    hint = "run `pod-sweeper migrate`"
    if not await _ledger_exists(conn):
        raise SchemaError(f"schema {SCHEMA} is not migrated in this database: {hint}")
    rows = await _read_ledger_rows(conn)  # the ledger exists: checked just above
    try:
        pending = _verify({version: checksum for version, (checksum, _) in rows.items()})
    except MigrationError as exc:
        raise SchemaError(str(exc)) from None
    if pending:
        names = ", ".join(m.filename for m in pending)
        raise SchemaError(f"schema {SCHEMA} is behind this pod-sweeper (missing {names}): {hint}")
    if (why := too_new(rows)) is not None:
        raise SchemaError(why)
    return max(rows)
