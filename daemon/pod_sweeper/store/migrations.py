"""Forward-only schema migrations, and the schema check every long-running command starts with.

Each ``migrations/NNNN_name.sql`` is applied once, in its own transaction, and recorded with its
SHA-256 in ``pod_sweeper.schema_migrations``, under a transaction-scoped advisory lock, so two
``migrate`` runs at once (two replicas' init containers, say, even through a transaction pooler) apply
each file exactly once: the second waits, then finds nothing left to do. An applied file whose checksum
changed is a hard error: the database no longer matches the text anyone can read.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from loguru import logger

from pod_sweeper.core.errors import MigrationError, SchemaError
from pod_sweeper.core.resources import resource_dir
from pod_sweeper.store import queries
from pod_sweeper.store.db import Connection

SCHEMA = "pod_sweeper"
LEDGER = "schema_migrations"
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


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
    cur = await conn.execute(queries.load("ledger_read"))
    return {row["version"]: row["checksum"] for row in await cur.fetchall()}


def _verify(applied: dict[int, str]) -> list[Migration]:
    """The migrations still to apply; raises if the database and the files disagree."""
    by_version = {m.version: m for m in shipped()}
    for version, checksum in applied.items():
        migration = by_version.get(version)
        if migration is None:
            raise SchemaError(
                f"the database has migration {version:04d}, which this pod-sweeper does not ship: "
                "it was migrated by a newer version; upgrade pod-sweeper"
            )
        if migration.checksum != checksum:
            raise MigrationError(
                f"migration {migration.filename} was edited after it was applied "
                f"(recorded sha256 {checksum[:12]}..., file {migration.checksum[:12]}...); "
                "restore the file and add a new migration instead"
            )
    return [m for m in shipped() if m.version not in applied]


async def migrate(conn: Connection, *, dry_run: bool = False) -> list[Migration]:
    """Apply what is missing (or, with ``dry_run``, only say what that would be).

    Each migration is one transaction that first takes a transaction-scoped advisory lock, then reads the
    ledger and applies the first migration still missing. Concurrent runs queue on the lock and each
    finds the ledger as the one before it left it, so every file is applied exactly once. No lock outlives
    its transaction, so this is safe through a transaction pooler too (a session lock there stays held by
    a server connection no client owns)."""
    if dry_run:
        return _verify(await _applied(conn))
    await conn.set_autocommit(True)
    applied: list[Migration] = []
    while True:
        async with conn.transaction():
            await conn.execute(queries.load("advisory_lock"), {"key": queries.Lock.MIGRATION})
            await conn.execute(queries.load("ledger_create"))
            pending = _verify(await _read_ledger(conn))
            if not pending:
                return applied
            migration = pending[0]
            logger.info("applying migration {migration}", migration=migration.filename)
            await conn.execute(queries.shipped_sql(migration.path))
            await conn.execute(
                queries.load("ledger_record"),
                {"version": migration.version, "name": migration.name, "checksum": migration.checksum},
            )
        applied.append(migration)


async def check_schema(conn: Connection) -> int:
    """Raise SchemaError unless the schema is exactly at the version this pod-sweeper ships."""
    hint = "run `pod-sweeper migrate`"
    if not await _ledger_exists(conn):
        raise SchemaError(f"schema {SCHEMA} is not migrated in this database: {hint}")
    try:
        pending = _verify(await _read_ledger(conn))  # the ledger exists: checked just above
    except MigrationError as exc:
        raise SchemaError(str(exc)) from None
    if pending:
        names = ", ".join(m.filename for m in pending)
        raise SchemaError(f"schema {SCHEMA} is behind this pod-sweeper (missing {names}): {hint}")
    return expected_version()
