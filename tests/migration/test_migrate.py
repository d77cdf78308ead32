"""The migration chain: idempotent, safe when run twice at once, strict about edited files, and
building exactly the committed schema, docs/schema.sql (the one snapshot: run on an empty database it
must build what the chain builds, on every PostgreSQL major, and it is the chain's own text on the
major it was generated from)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from helpers import run, settings_for, with_dbname
from migration.readable import major_of, readable_schema
from pod_sweeper.core.errors import MigrationError, SchemaError
from pod_sweeper.store import db, queries
from pod_sweeper.store.schema import migrations
from pod_sweeper.store.sweep.cursor import START

READABLE = Path(__file__).resolve().parents[2] / "docs" / "schema.sql"

# A normalized description of every object in our schema, stable across PostgreSQL versions and
# independent of pg_dump's formatting. A view is described by the columns it reads, not by its
# deparsed text, which changes between major versions (what the views answer is tested in test_dba).
_CATALOG = """
SELECT 'table ' || c.relname || ' ' || coalesce(array_to_string(c.reloptions, ','), '') FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pod_sweeper' AND c.relkind = 'r'
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
       || CASE WHEN a.attgenerated = 's' THEN ' stored' ELSE '' END
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = 'pod_sweeper' AND c.relkind IN ('r', 'v') AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint ' || c.relname || '.' || k.conname || ' ' || pg_get_constraintdef(k.oid)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pod_sweeper' AND k.contype <> 'n'  -- 18 catalogs NOT NULL too; the column lines say it
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'pod_sweeper'
UNION ALL
SELECT 'view ' || v.relname || ' reads ' || string_agg(DISTINCT t.relname || '.' || a.attname, ', ')
FROM pg_class v JOIN pg_namespace n ON n.oid = v.relnamespace
JOIN pg_rewrite r ON r.ev_class = v.oid
JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid AND d.refobjid <> v.oid
JOIN pg_class t ON t.oid = d.refobjid
JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE n.nspname = 'pod_sweeper' AND v.relkind = 'v' GROUP BY v.relname
UNION ALL
SELECT 'function ' || p.proname || '(' || pg_get_function_arguments(p.oid) || ') '
       || pg_get_function_result(p.oid) || ' ' || md5(p.prosrc)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'pod_sweeper'
ORDER BY 1
"""


def describe_schema(url: str) -> str:
    with psycopg.connect(url) as conn:
        return "\n".join(row[0] for row in conn.execute(_CATALOG).fetchall()) + "\n"


async def _migrate(url: str, dry_run: bool = False, **kwargs: Any) -> list[migrations.Migration]:
    settings = settings_for(url)
    async with db.connection(settings) as conn:
        return await migrations.migrate(conn, dry_run=dry_run, second=lambda: db.connection(settings), **kwargs)


async def _check(url: str) -> int:
    async with db.connection(settings_for(url)) as conn:
        return await migrations.check_schema(conn)


def committed_schema(url: str, text: str | None = None) -> str:
    """The description of what docs/schema.sql (or ``text``) builds, run in a scratch database of the
    server at ``url`` (made and dropped here)."""
    name = f"pod_sweeper_committed_{uuid.uuid4().hex[:8]}"
    server = with_dbname(url, "postgres")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with psycopg.connect(with_dbname(url, name), autocommit=True) as conn:
            conn.execute(text if text is not None else READABLE.read_text())  # type: ignore[call-overload]
        return describe_schema(with_dbname(url, name))
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_chain_builds_exactly_the_committed_schema(empty_db_url: str) -> None:
    """On every major: the chain and docs/schema.sql build the same tables, columns, constraints,
    indexes, views and functions (function bodies by their checksum)."""
    run(_migrate(empty_db_url))
    assert describe_schema(empty_db_url) == committed_schema(empty_db_url), (
        "the migrations no longer build docs/schema.sql; if that is intended, run "
        "tests/migration/test_migrate.py with POD_SWEEPER_UPDATE_REFERENCE=1 and commit the new file"
    )


def test_a_committed_schema_missing_an_index_is_told_apart(empty_db_url: str) -> None:
    """The negative control: the same check, on docs/schema.sql without one of its indexes, fails."""
    run(_migrate(empty_db_url))
    text = READABLE.read_text()
    [line] = [line for line in text.splitlines() if line.startswith("CREATE INDEX outbox_done_pod ")]
    assert describe_schema(empty_db_url) != committed_schema(empty_db_url, text.replace(line, ""))


def test_the_readable_schema_is_what_the_chain_builds(empty_db_url: str) -> None:
    """docs/schema.sql, function bodies included, against a database migrated from scratch. PostgreSQL
    deparses views and defaults in its own words, which change between majors: the file is held on the
    major it was generated from (CI's first pass), and the test above holds every major to it."""
    run(_migrate(empty_db_url))
    actual = readable_schema(empty_db_url)
    if os.environ.get("POD_SWEEPER_UPDATE_REFERENCE"):
        READABLE.write_text(actual)
    committed = READABLE.read_text()
    if major_of(committed) != major_of(actual):
        pytest.skip(f"docs/schema.sql is PostgreSQL {major_of(committed)}'s; this server is {major_of(actual)}")
    assert actual == committed, (
        "the migrations no longer build docs/schema.sql; if that is intended, run this test with "
        "POD_SWEEPER_UPDATE_REFERENCE=1 and commit the new file"
    )


def test_rerun_is_a_no_op(empty_db_url: str) -> None:
    assert [m.version for m in run(_migrate(empty_db_url))] == [m.version for m in migrations.shipped()]
    before = describe_schema(empty_db_url)
    assert run(_migrate(empty_db_url)) == []
    assert describe_schema(empty_db_url) == before
    with psycopg.connect(empty_db_url) as conn:
        ledger = conn.execute("SELECT version, checksum FROM pod_sweeper.schema_migrations").fetchall()
    assert ledger == [(m.version, m.checksum) for m in migrations.shipped()]


def test_dry_run_changes_nothing(empty_db_url: str) -> None:
    assert [m.filename for m in run(_migrate(empty_db_url, dry_run=True))] == [m.filename for m in migrations.shipped()]
    with psycopg.connect(empty_db_url) as conn:
        assert conn.execute("SELECT to_regnamespace('pod_sweeper')").fetchone() == (None,)


def test_concurrent_runs_apply_each_migration_once(empty_db_url: str) -> None:
    async def both() -> list[list[migrations.Migration]]:
        return list(await asyncio.gather(*(_migrate(empty_db_url) for _ in range(4))))

    results = run(both())
    # Each migration is its own locked transaction: the runs may share the work, never repeat it.
    applied = sorted(m.version for r in results for m in r)
    assert applied == [m.version for m in migrations.shipped()]
    assert run(_check(empty_db_url)) == migrations.expected_version()
    with psycopg.connect(empty_db_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone() == (0,)


def test_edited_applied_migration_is_a_hard_error(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE pod_sweeper.schema_migrations SET checksum = 'edited' WHERE version = 1")
    with pytest.raises(MigrationError, match=r"0001_outbox\.sql was edited after it was applied"):
        run(_migrate(db_url))
    with pytest.raises(SchemaError, match="was edited"):
        run(_check(db_url))


def test_schema_check(empty_db_url: str, db_url: str) -> None:
    with pytest.raises(SchemaError, match=r"not migrated.*pod-sweeper migrate"):
        run(_check(empty_db_url))
    assert run(_check(db_url)) == migrations.expected_version()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO pod_sweeper.schema_migrations (version, name, checksum) VALUES (99, 'x', 'y')")
    with pytest.raises(SchemaError, match=r"ships migration 0099 or later.*upgrade pod-sweeper"):
        run(_check(db_url))
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM pod_sweeper.schema_migrations")
    with pytest.raises(SchemaError, match="behind this pod-sweeper"):
        run(_check(db_url))


def test_the_live_enqueue_takes_the_wakeup_lock_the_sweeper_arms_with(pg: psycopg.Connection[Any]) -> None:
    """The enqueue the triggers call is the latest migration's definition (0009 replaced 0007's): the
    shared lock it holds from reading the wakeup flag to its commit must be the one ``arm`` takes
    exclusively, or a retire could read the flag clear while a sweeper arms and falls asleep."""
    import re

    functions = pg.execute(
        "SELECT p.oid::regprocedure::text AS signature, pg_get_functiondef(p.oid) AS body"
        " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'pod_sweeper' AND p.prokind = 'f'"
    ).fetchall()
    keys = {f["signature"]: set(re.findall(r"pg_advisory_xact_lock_shared\((\d+)\)", f["body"])) for f in functions}
    live = "pod_sweeper.enqueue(integer,text,bigint,text,text,uuid,text,text)"
    assert keys[live] == {str(int(queries.Lock.WAKEUP))}
    assert {sig for sig, found in keys.items() if found} == {live}  # no other definition takes another key


def test_claim_query_uses_the_partial_index_at_100k_done_rows(pg: psycopg.Connection[Any]) -> None:

    pg.execute("INSERT INTO pod_sweeper.attachments (table_schema, table_name, column_map) VALUES ('p', 't', '{}')")
    pg.execute(
        """
        INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,
                                        reason, status, outcome, done_at)
        SELECT 1, 's' || g, g, 'ns', 'p' || g, gen_random_uuid(), 'retired', 'done', 'deleted', now()
        FROM generate_series(1, 100000) g
        """
    )
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason) SELECT 1, 'open' || g, g, 'ns', 'q' || g, gen_random_uuid(), 'retired'"
        " FROM generate_series(1, 50) g"
    )
    pg.execute("ANALYZE pod_sweeper.outbox")
    # EXPLAIN without ANALYZE plans the UPDATE without running it.
    # The claim, with the replication guard off and on, and the guard's mark.
    for guard in (None, ["standby"]):
        plan_rows = pg.execute(
            psycopg.sql.SQL("EXPLAIN (FORMAT TEXT) {}").format(queries.load("claim")),
            {
                "batch": 100,
                "owner": "t",
                "lease_seconds": 60,
                "disarm": True,
                "cluster": "default",
                "guard": guard,
                "floor": START,
                "disarm_after": 0.0,
                "gathering": False,
                "transaction_rows": 500,  # the shipped breaker_transaction_rows: the first look planned too
            },
        ).fetchall()
        plan = "\n".join(r["QUERY PLAN"] for r in plan_rows)
        assert "outbox_claimable" in plan, plan
        # (the one-row wakeup flag is read with a sequential scan, as it should be)
        assert "Seq Scan on outbox" not in plan, plan
        # pod_sweeper.keeping, the kept-back rule, is inlined: its pauses and holds are read by index.
        assert "Function Scan on keeping" not in plan and "pauses_pkey" in plan and "holds_pkey" in plan, plan
    mark = "\n".join(
        r["QUERY PLAN"]
        for r in pg.execute(
            psycopg.sql.SQL("EXPLAIN (FORMAT TEXT) {}").format(queries.load("guard_mark")), {"cluster": "default"}
        ).fetchall()
    )
    assert "outbox_claimable" in mark and "Seq Scan on outbox" not in mark, mark
    # The lag gauge is read on a timer: it must not walk the done rows either.
    lag_plan = "\n".join(r["QUERY PLAN"] for r in pg.execute("EXPLAIN SELECT * FROM pod_sweeper.lag").fetchall())
    assert "outbox_claimable" in lag_plan and "outbox_dead" in lag_plan, lag_plan
    assert "Seq Scan on outbox" not in lag_plan, lag_plan
    # The rejects are counted up to a limit: a table a broken writer filled costs no more than that.
    assert "Limit" in lag_plan.split("rejects")[0].rsplit("InitPlan", 1)[1], lag_plan


def test_settings_are_scoped_to_each_transaction_and_nothing_is_prepared_behind_a_pooler(db_url: str) -> None:
    """Behind a transaction pooler nothing of ours outlives a transaction, so the pooler's next client
    sees none of it; the daemon's pool prepares statements on a direct connection only, a one-shot
    command never."""
    show = "SHOW idle_in_transaction_session_timeout"

    async def read(pooler: bool) -> dict[str, Any]:
        pool = db.make_pool(settings_for(db_url, transaction_pooler=pooler), max_size=1)  # the daemon's
        await pool.open(wait=True, timeout=10)
        async with pool, pool.connection() as conn:
            seen: dict[str, Any] = {"before": (await (await conn.execute(show)).fetchone())}
            async with conn.transaction():
                seen["in_transaction"] = await (await conn.execute(show)).fetchone()
                async with conn.transaction():
                    seen["in_savepoint"] = await (await conn.execute(show)).fetchone()
            seen["after"] = await (await conn.execute(show)).fetchone()
            for _ in range(10):  # psycopg prepares a statement run this often (prepare_threshold 5)
                await conn.execute(queries.load("status_summary"))
            seen["prepared"] = await (await conn.execute("SELECT count(*) AS n FROM pg_prepared_statements")).fetchone()
            return seen

    default = {"idle_in_transaction_session_timeout": "0"}
    ours = {"idle_in_transaction_session_timeout": "15s"}
    pooled = run(read(True))  # through a transaction pooler: only inside our transactions, nothing prepared
    assert pooled["before"] == default and pooled["after"] == default
    assert pooled["in_transaction"] == ours and pooled["in_savepoint"] == ours
    assert pooled["prepared"] == {"n": 0}
    direct = run(read(False))  # direct: the session is ours, set once; the claim and record prepared
    assert direct["before"] == direct["in_transaction"] == direct["after"] == ours
    assert direct["prepared"]["n"] > 0

    async def one_shot() -> Any:
        async with db.connection(settings_for(db_url)) as conn:
            for _ in range(10):
                await conn.execute(queries.load("status_summary"))
            return await (await conn.execute("SELECT count(*) AS n FROM pg_prepared_statements")).fetchone()

    assert run(one_shot()) == {"n": 0}


def test_a_database_that_ran_the_earlier_texts_ends_at_the_same_schema(empty_db_url: str) -> None:
    """0009-0011 were rewritten before any release (their whole-table work moved to 0013, online): a
    database migrated with their earlier texts (``earlier/``, as a build of main applied them) is
    accepted, and the rest of the chain brings it to the committed schema."""
    earlier = sorted(Path(__file__).with_name("earlier").glob("*.sql"))
    assert [p.name[:4] for p in earlier] == ["0009", "0010", "0011"]
    run(_migrate(empty_db_url, target=8))
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        for path in earlier:
            text = path.read_text()
            checksum = hashlib.sha256(text.encode()).hexdigest()
            assert checksum in migrations.EARLIER_CHECKSUMS[int(path.name[:4])]
            with conn.transaction():
                conn.execute(text)  # type: ignore[call-overload]
                conn.execute(
                    "INSERT INTO pod_sweeper.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (int(path.name[:4]), path.stem[5:], checksum),
                )
    assert [m.version for m in run(_migrate(empty_db_url))] == list(range(12, migrations.expected_version() + 1))
    assert describe_schema(empty_db_url) == committed_schema(empty_db_url)
    assert run(_check(empty_db_url)) == migrations.expected_version()


def _a_next_release_migrated(url: str, *, readable_from: int | None) -> int:
    """What a next release's migrate leaves: an expand step (a new nullable column) recorded with the
    oldest schema version it declares may run on it. Its version."""
    version = migrations.expected_version() + 1
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("ALTER TABLE pod_sweeper.outbox ADD COLUMN next_release_note text")
        conn.execute(
            "INSERT INTO pod_sweeper.schema_migrations (version, name, checksum, readable_from)"
            " VALUES (%s, %s, %s, %s)",
            (version, "next", "0" * 64, readable_from),
        )
    return version


def test_this_release_runs_on_the_next_ones_schema_when_it_declares_this_one_readable(db_url: str) -> None:
    version = _a_next_release_migrated(db_url, readable_from=migrations.expected_version())
    assert run(_check(db_url)) == version  # the database's version, which this release may run on
    assert run(_migrate(db_url)) == []  # a rolled-back image's migrate Job: nothing to do, no failure
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE pod_sweeper.schema_migrations SET readable_from = %s WHERE version = %s", (version, version)
        )
    with pytest.raises(SchemaError, match=f"ships migration {version:04d} or later"):
        run(_check(db_url))
    with pytest.raises(SchemaError, match="upgrade pod-sweeper"):
        run(_migrate(db_url))


def test_every_shipped_migration_records_what_it_declares_readable(empty_db_url: str) -> None:
    run(_migrate(empty_db_url))
    with psycopg.connect(empty_db_url) as conn:
        recorded = dict(conn.execute("SELECT version, readable_from FROM pod_sweeper.schema_migrations").fetchall())
    assert recorded == {m.version: m.readable_from for m in migrations.shipped()}
    # 0014 (two nullable columns older replicas never touch) is the first expand step; 0015 (a new
    # function) the second; 0016 (indexes and a view) the third; 0017 (a function) the fourth; 0018 (the
    # enqueue's NOTIFY payload) the fifth; 0019 (a new table) the sixth; 0020 (tables and functions,
    # which the release before 0019 reads too) the seventh; 0021 (the channel's function inlined) the eighth.
    expand = {m.version: m.readable_from for m in migrations.shipped() if m.readable_from != m.version}
    assert expand == {14: 13, 15: 14, 16: 15, 17: 16, 18: 17, 19: 18, 20: 18, 21: 18}
