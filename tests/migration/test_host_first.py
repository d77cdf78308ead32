"""``migrate`` never waits in front of the host's writes: each migration applied while a DBA's session
holds a transaction open on every table of ours and a writer inserts outbox rows (what every retire's
trigger does); no insert waits past the lock timeout, and a migration that cannot have its locks gives
up by its deadline naming the session that held them, then applies once that session ends."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers import run, settings_for
from pod_sweeper.core.errors import MigrationLockTimeout
from pod_sweeper.store import db
from pod_sweeper.store.schema import migrations

LOCK_TIMEOUT = 0.2
DEADLINE = 1.5
# What a host write may wait while a migrate runs: the lock timeout, and room for a loaded machine.
BOUND = LOCK_TIMEOUT + 0.8


async def _migrate(url: str, **kwargs: Any) -> list[migrations.Migration]:
    async with db.connection(settings_for(url)) as conn:
        return await migrations.migrate(conn, **kwargs)


class Writer(threading.Thread):
    """Inserts outbox rows one transaction at a time, as retires do, timing each."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.waits, self.stop = url, [0.0], threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                started = time.monotonic()
                conn.execute(
                    "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name,"
                    " pod_uid, reason) VALUES (1, 's', 1, 'ns', 'p', gen_random_uuid(), 'retired')"
                )
                self.waits.append(time.monotonic() - started)
                self.stop.wait(0.02)


@pytest.mark.parametrize("version", range(2, migrations.expected_version() + 1))
def test_a_migration_never_holds_up_the_hosts_writes_behind_a_dbas_open_transaction(
    empty_db_url: str, version: int
) -> None:
    url = empty_db_url
    run(_migrate(url, target=version - 1))
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute(
            "INSERT INTO pod_sweeper.attachments (table_schema, table_name, column_map) VALUES ('public', 'x', '{}')"
        )
    with psycopg.connect(url) as dba:  # a DBA's psql: a transaction that has read every table of ours
        tables = dba.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'pod_sweeper' AND c.relkind = 'r'"
        ).fetchall()
        for (table,) in tables:
            dba.execute(sql.SQL("SELECT 1 FROM {} LIMIT 1").format(sql.Identifier("pod_sweeper", table)))
        dba_pid = dba.info.backend_pid
        writer = Writer(url)
        writer.start()
        try:
            try:
                applied = run(_migrate(url, target=version, lock_timeout=LOCK_TIMEOUT, deadline=DEADLINE))
                gave_up = None
            except MigrationLockTimeout as exc:
                applied, gave_up = [], str(exc)
        finally:
            writer.stop.set()
            writer.join(10)
        dba.rollback()
    assert max(writer.waits) < BOUND, f"a host write waited {max(writer.waits):.2f} s behind migration {version}"
    if version == 11:  # a constraint replaced on the outbox: it must wait for the DBA, and not in front of the host
        assert gave_up is not None
    if gave_up is not None:
        assert len(writer.waits) > 5  # the writer kept writing while the migrate retried
        assert f"pid {dba_pid} " in gave_up and "nothing of it was applied" in gave_up, gave_up
        applied = run(_migrate(url, target=version, lock_timeout=LOCK_TIMEOUT, deadline=DEADLINE))
    assert [m.version for m in applied] == [version]
