"""What the retire trigger's cost is made of: the trigger benchmark's pgbench run against variants of
the enqueue, each in a fresh database, interleaved with the same table without a trigger.

    .venv/bin/python bench/trigger_variants.py            # every variant, about 3 minutes on 2 cores
    .venv/bin/python bench/trigger_variants.py naive clear

The variants replace ``pod_sweeper.enqueue`` (or the generated trigger function) in a scratch database
only; bench/README.md records what each measured. Prints one line per variant; never fails.
"""

from __future__ import annotations

import asyncio
import statistics
import sys

import psycopg
from loguru import logger
from steps.trigger import retire_tps, seed_retire_tables  # bench/ is this script's own folder

from harness.postgres import ThrowawayCluster
from pod_sweeper.core.settings import Settings
from pod_sweeper.demo.reference import executions_ddl
from pod_sweeper.store import db
from pod_sweeper.store.admin import attach
from pod_sweeper.store.schema import migrations

_SIGNATURE = (
    "pod_sweeper.enqueue(p_attachment_id integer, p_sandbox_id text, p_generation bigint, p_namespace text,"
    " p_pod_name text, p_pod_uid uuid, p_reason text) RETURNS void LANGUAGE plpgsql"
    " SET search_path = pg_catalog, pg_temp"
)
_INSERT = (
    "INSERT INTO pod_sweeper.outbox AS o (attachment_id, sandbox_id, generation, pod_namespace, pod_name,"
    " pod_uid, reason) VALUES (p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name, p_pod_uid,"
    " p_reason) ON CONFLICT (pod_uid) DO UPDATE SET status = 'pending'"
    " WHERE o.status = 'done' AND o.outcome = 'skipped_active';"
)


def _enqueue(body: str) -> str:
    return f"CREATE OR REPLACE FUNCTION {_SIGNATURE} AS $$ BEGIN {body} END; $$"


VARIANTS = {
    # migration 0007 as shipped, the flag as a claiming sweeper keeps it, and as while all sleep
    "clear": "UPDATE pod_sweeper.wakeup SET armed = false",
    "armed": "UPDATE pod_sweeper.wakeup SET armed = true",
    # before 0007: the insert and a NOTIFY in every retire
    "naive": _enqueue(_INSERT + " PERFORM pg_notify('pod_sweeper', '');"),
    "insert only": _enqueue(_INSERT),
    "empty enqueue": _enqueue(""),
    "empty trigger": "CREATE OR REPLACE FUNCTION pod_sweeper.enqueue_1() RETURNS trigger LANGUAGE plpgsql"
    " SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ BEGIN RETURN NEW; END; $$",
}


async def _prepare(url: str) -> None:
    async with db.connection(Settings(database_url=url, log_level="WARNING")) as conn:
        await migrations.migrate(conn)
        await conn.execute(executions_ddl())
        await attach.attach(conn, attach.parse_table("public.executions"), attach.parse_mapping([]))


def main() -> int:
    names = sys.argv[1:] or list(VARIANTS)
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    with ThrowawayCluster() as cluster:
        for i, name in enumerate(names):
            with psycopg.connect(cluster.url(), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "variant_{i}"')
            url = cluster.url(f"variant_{i}")
            asyncio.run(_prepare(url))
            seed_retire_tables(url)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(VARIANTS[name])  # type: ignore[arg-type]  # our own literal SQL
            figures: dict[str, list[float]] = {"executions": [], "plain": []}
            for _ in range(3):
                for table in figures:
                    figures[table].append(retire_tps(url, table, 3))
            with_trigger, without = (statistics.median(figures[t]) for t in ("executions", "plain"))
            ratio = with_trigger / without
            print(f"{name:14} {with_trigger:8.0f} vs {without:8.0f} tps  ratio {ratio:.3f}", flush=True)
            with psycopg.connect(cluster.url(), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE "variant_{i}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
