"""The real ``pod-sweeper`` CLI as a subprocess: exit codes, one-line errors, the quick-start path."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from harness.postgres import free_port
from helpers import (
    add_execution,
    cli,
    create_executions,
    daemon_env,
    http_get,
    outbox,
    retire,
    sample,
    spawn_daemon,
    stop_process,
    wait_until,
    with_dbname,
)
from pod_sweeper.store.schema.migrations import shipped


def test_quick_start_migrate_attach_retire_status(empty_db_url: str) -> None:
    first = cli("migrate", url=empty_db_url)
    assert (first.returncode, first.stdout.strip()) == (0, f"applied {len(shipped())} migration(s)"), first.stderr
    second = cli("migrate", url=empty_db_url)
    assert (second.returncode, second.stdout.strip()) == (0, "schema is up to date")
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        create_executions(conn)
        attached = cli("attach", "--table", "public.executions", url=empty_db_url)
        assert attached.returncode == 0, attached.stderr
        conn.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
            " SELECT 's' || g, 1, 'ns', 'p' || g, gen_random_uuid() FROM generate_series(1, 5) g"
        )
        conn.execute("UPDATE executions SET active = false WHERE sandbox_id IN ('s1', 's2', 's3')")
        conn.execute("UPDATE executions SET state = 'gone' WHERE sandbox_id = 's1'")
        conn.execute("DELETE FROM executions WHERE sandbox_id = 's5'")
        rows = outbox(conn)
    assert sorted((r["sandbox_id"], r["reason"]) for r in rows) == [
        ("s1", "retired"),
        ("s2", "retired"),
        ("s3", "retired"),
        ("s5", "row_deleted"),
    ]
    status = cli("status", "--json", url=empty_db_url)
    assert status.returncode == 0, status.stderr
    parsed: dict[str, Any] = json.loads(status.stdout)  # stdout is only JSON
    assert parsed["lag"]["pending"] == 4 and parsed["lag"]["claimable"] == 4
    assert parsed["summary"][0]["status"] == "pending" and parsed["summary"][0]["rows"] == 4
    text = cli("status", url=empty_db_url)
    assert "claimable" in text.stdout and "pending" in text.stdout


@pytest.mark.parametrize(
    "args",
    [("status",), ("status", "--json"), ("explain", "ns/p1"), ("explain", "s1"), ("retry", "--dead", "--dry-run")],
)
def test_a_command_that_does_not_talk_to_kubernetes_does_not_import_its_client(
    db_url: str, args: tuple[str, ...]
) -> None:
    """`python -X importtime` names every module the command imported, on stderr: the Kubernetes
    client (half a second to import) and the daemon's machinery are not among them."""
    done = cli(*args, url=db_url, python_flags=("-X", "importtime"))
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "pod_sweeper.store.db" in imported  # the measure works: it saw the command's own modules
    assert not {m for m in imported if m.split(".")[0] in ("kubernetes", "psycopg_pool")}, sorted(imported)
    assert "pod_sweeper.tasks.process.runner" not in imported


def test_migrate_dry_run_prints_and_changes_nothing(empty_db_url: str) -> None:
    result = cli("migrate", "--dry-run", url=empty_db_url)
    assert result.returncode == 0
    assert "would apply 0001_outbox.sql" in result.stdout
    assert cli("status", url=empty_db_url).returncode == 3


def test_unmigrated_schema_exits_3_with_the_fix(empty_db_url: str) -> None:
    result = cli("status", url=empty_db_url)
    assert result.returncode == 3
    assert result.stderr.strip().splitlines() == [
        "pod-sweeper: schema pod_sweeper is not migrated in this database: run `pod-sweeper migrate`"
    ]


def test_unreachable_database_fails_fast_with_one_line_and_no_password() -> None:
    from harness.postgres import free_port

    url = f"postgresql://app:s3cret@127.0.0.1:{free_port()}/nope"
    started = time.monotonic()
    result = cli("migrate", url=url, timeout=15)
    assert time.monotonic() - started < 10
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("pod-sweeper: cannot connect to the database (")
    assert "s3cret" not in result.stderr and "password=***" in line


def test_wrong_database_name_is_one_line(db_url: str) -> None:
    result = cli("status", url=with_dbname(db_url, "no_such_database_here"))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "does not exist" in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (("status",), {"POD_SWEEPER_POLL_INTERVAL": "soon"}, "invalid setting POD_SWEEPER_POLL_INTERVAL"),
        (("status",), {"POD_SWEEPER_DATABASE_URL": "not a url"}, "invalid setting POD_SWEEPER_DATABASE_URL"),
        (("status",), {}, "POD_SWEEPER_DATABASE_URL is not set"),
        (("frobnicate",), {}, "invalid choice: 'frobnicate'"),
        (("attach",), {"POD_SWEEPER_DATABASE_URL": "postgresql://x/y"}, "--table"),
        (("attach", "--table", "nodot"), {"POD_SWEEPER_DATABASE_URL": "postgresql://x/y"}, "expected SCHEMA.TABLE"),
        (("--config", "/nonexistent.toml", "status"), {}, "does not exist"),
    ],
)
def test_bad_configuration_exits_2_with_one_line(args: tuple[str, ...], env: dict[str, str], message: str) -> None:
    result = cli(*args, **env)
    assert result.returncode == 2, result
    [line] = result.stderr.strip().splitlines()
    assert message in line and "Traceback" not in result.stderr


def test_attach_on_a_table_that_does_not_fit_exits_2_and_changes_nothing(
    pg: psycopg.Connection[Any], db_url: str
) -> None:
    pg.execute("CREATE TABLE t (sandbox_id text, generation int, pod_name text, pod_uid uuid, active bool)")
    result = cli("attach", "--table", "public.t", url=db_url)
    assert result.returncode == 2
    assert result.stderr.strip() == "pod-sweeper: table public.t has no column 'pod_namespace' (role pod_namespace)"
    host = (
        "SELECT count(*) AS n FROM pg_trigger"
        " WHERE NOT tgisinternal AND tgrelid::regclass::text NOT LIKE 'pod_sweeper.%'"
    )
    assert pg.execute(host).fetchone()["n"] == 0


def test_json_logs(empty_db_url: str) -> None:
    result = cli("migrate", url=empty_db_url, POD_SWEEPER_LOG_FORMAT="json")
    entries = [json.loads(line) for line in result.stderr.strip().splitlines()]
    assert entries[0]["msg"] == "applying migration 0001_outbox.sql"
    assert entries[0]["migration"] == "0001_outbox.sql"


def test_a_bad_setting_under_json_logs_is_one_json_line_and_exit_2() -> None:
    """JSON asked for, another setting bad: the one line is still JSON (a shipper or journald reads it)."""
    result = cli(
        "status", url="postgresql://x@127.0.0.1:1/x", POD_SWEEPER_LOG_FORMAT="json", POD_SWEEPER_CONCURRENCY="many"
    )
    assert result.returncode == 2
    [entry] = [json.loads(line) for line in result.stderr.strip().splitlines()]
    assert entry["level"] == "CRITICAL" and "invalid setting POD_SWEEPER_CONCURRENCY" in entry["msg"]


def test_settings_command_prints_the_table() -> None:
    result = cli("settings")
    assert result.returncode == 0
    assert "| `POD_SWEEPER_LEASE_SECONDS` | `60.0` |" in result.stdout


def test_sql_lists_and_prints_shipped_queries() -> None:
    listing = cli("sql")
    assert listing.returncode == 0 and {"alerts", "dead", "lag", "open"} <= set(listing.stdout.split())
    dead = cli("sql", "dead")
    assert dead.returncode == 0 and "WHERE status = 'dead'" in dead.stdout
    missing = cli("sql", "nope")
    assert missing.returncode == 2 and "no shipped query 'nope'" in missing.stderr


def test_retry_and_prune_commands(pg: psycopg.Connection[Any], db_url: str) -> None:
    pg.execute("INSERT INTO pod_sweeper.attachments (table_schema, table_name, column_map) VALUES ('p', 't', '{}')")
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason, status, last_error) SELECT 1, 's' || g, g, 'ns', 'p' || g, gen_random_uuid(), 'retired', 'dead',"
        " 'x' FROM generate_series(1, 3) g"
    )
    pg.execute(
        "UPDATE pod_sweeper.outbox SET status = 'done', outcome = 'deleted', done_at = '2000-01-01', "
        "last_error = NULL WHERE id = 3"
    )
    usage = cli("retry", url=db_url)
    assert usage.returncode == 2 and "--dead" in usage.stderr
    retried = cli("retry", "--dead", url=db_url)
    assert (retried.returncode, retried.stdout.strip()) == (0, "reopened 2 row(s) in cluster default: 1, 2")
    pruned = cli("prune", url=db_url)
    assert pruned.returncode == 0 and pruned.stdout.startswith("deleted 1 done row(s)")
    assert [r["status"] for r in outbox(pg)] == ["pending", "pending"]


def test_check_reports_each_check_and_a_missing_verb(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    ok = cli("check", "--namespace", "sandboxes", url=db_url, POD_SWEEPER_KUBECONFIG=str(kube.kubeconfig))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    lines = ok.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "ok    settings",
        "ok    retries",
        "ok    database",
        "ok    schema",
        "ok    attached tables",
        "ok    wakeups",
        "ok    kubernetes",
        "ok    namespace scope",
        "ok    get pods in sandboxes",
        "ok    delete pods in sandboxes",
        "ok    create events in sandboxes",  # Events are on by default
    ]
    assert "33 retries spanning 1 h 4 min to 2 h 8 min before it goes dead" in ok.stdout  # the defaults
    kube.denied.add(("delete", "sandboxes"))
    missing = cli("check", "--namespace", "sandboxes", url=db_url, POD_SWEEPER_KUBECONFIG=str(kube.kubeconfig))
    assert missing.returncode == 1
    assert (
        "FAIL  delete pods in sandboxes: missing: the daemon needs 'delete' on pods in sandboxes to delete retired pods"
        in missing.stdout
    )
    reviews = [r for r in kube.requests if r.path.endswith("selfsubjectaccessreviews")]
    asked = [
        (r.body["spec"]["resourceAttributes"]["verb"], r.body["spec"]["resourceAttributes"]["resource"])
        for r in reviews
    ]
    assert asked[-3:] == [("get", "pods"), ("delete", "pods"), ("create", "events")]


def test_check_asks_about_every_namespace_of_the_scope_and_names_rows_outside_it(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    env = {"POD_SWEEPER_KUBECONFIG": str(kube.kubeconfig), "POD_SWEEPER_NAMESPACES": "a,b"}
    kube.denied.add(("delete", "b"))
    scoped = cli("check", url=db_url, **env)
    assert scoped.returncode == 1
    assert "ok    namespace scope: a, b" in scoped.stdout and "ok    delete pods in a: allowed" in scoped.stdout
    assert "FAIL  delete pods in b: missing" in scoped.stdout
    add_execution(execs, kube, "sys", namespace="kube-system")
    retire(execs, "sys")
    unset = cli("check", url=db_url, POD_SWEEPER_KUBECONFIG=str(kube.kubeconfig))
    assert "every namespace but kube-system" in unset.stdout
    assert "FAIL  outside the scope: rows name kube-system: they end dead without a request" in unset.stdout


def test_check_on_an_unmigrated_database_fails_the_schema_line(empty_db_url: str, kube: Any) -> None:
    result = cli("check", "--namespace", "x", url=empty_db_url, POD_SWEEPER_KUBECONFIG=str(kube.kubeconfig))
    assert result.returncode == 1
    assert "FAIL  schema: schema pod_sweeper is not migrated" in result.stdout


def test_wrong_credentials_are_one_line_without_the_password(db_url: str) -> None:
    result = cli("status", url=make_conninfo(db_url, user="nobody_here", password="wrong-s3cret"))
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "nobody_here" in line and "wrong-s3cret" not in line


def test_backfill_command(pg: psycopg.Connection[Any], db_url: str) -> None:
    create_executions(pg)
    pg.execute(
        "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " SELECT 's' || g, 1, 'ns', 'p' || g, gen_random_uuid(), false FROM generate_series(1, 3) g"
    )
    assert cli("attach", "--table", "public.executions", url=db_url).returncode == 0
    dry = cli("backfill", "--dry-run", url=db_url)
    assert dry.returncode == 0 and "would enqueue 3 retired row(s)" in dry.stdout
    real = cli("backfill", url=db_url)
    assert real.returncode == 0 and "enqueued 3 retired row(s)" in real.stdout
    assert len(outbox(pg)) == 3


def test_check_names_tables_attached_before_the_rejects_migration(pg: psycopg.Connection[Any], db_url: str) -> None:
    pg.execute(
        "CREATE TABLE t (sandbox_id text, generation int, pod_namespace text, pod_name text, pod_uid text, active bool)"
    )
    assert cli("attach", "--table", "public.t", url=db_url).returncode == 0
    fresh = cli("check", "--namespace", "x", url=db_url, POD_SWEEPER_KUBECONFIG="/nonexistent")
    assert "triggers" not in fresh.stdout
    # What attach generated before migration 0008: the UID through try_uuid, a malformed one skipped.
    body = pg.execute("SELECT prosrc FROM pg_proc WHERE proname = 'enqueue_1'").fetchone()["prosrc"]
    old = body.replace("pod_sweeper.enqueue_text_uid(", "pod_sweeper.enqueue(").replace(
        '"pod_uid"::text', 'pod_sweeper.try_uuid("pod_uid"::text)'
    )
    assert old != body
    pg.execute(
        psycopg.sql.SQL(
            "CREATE OR REPLACE FUNCTION pod_sweeper.enqueue_1() RETURNS trigger LANGUAGE plpgsql AS {}"
        ).format(psycopg.sql.Literal(old))
    )
    stale = cli("check", "--namespace", "x", url=db_url, POD_SWEEPER_KUBECONFIG="/nonexistent")
    assert "FAIL  triggers: public.t: attached before migration 0008" in stale.stdout
    assert cli("attach", "--table", "public.t", url=db_url).returncode == 0
    assert "triggers" not in cli("check", "--namespace", "x", url=db_url, POD_SWEEPER_KUBECONFIG="/nonexistent").stdout


def test_an_install_without_an_attached_table_fails_check_and_the_daemon_says_so(
    db_url: str, kube: Any, tmp_path: Path
) -> None:
    """Migrated, granted, running, and no table attached: every retire would be lost to the sweeper, so
    `check` fails on it, and the daemon says so at start and in a gauge."""
    checked = cli("check", "--namespace", "sandboxes", url=db_url, POD_SWEEPER_KUBECONFIG=str(kube.kubeconfig))
    assert checked.returncode == 1
    assert "FAIL  attached tables: none for cluster default: no retire reaches the outbox" in checked.stdout
    port = free_port()
    log = tmp_path / "run.log"
    proc = spawn_daemon(daemon_env(db_url, kube.kubeconfig, POD_SWEEPER_HTTP_PORT=str(port)), log)
    try:
        wait_until(lambda: "no table is attached for cluster default" in log.read_text(), timeout=30)
        wait_until(lambda: sample(http_get(port, "/metrics")[1], "pod_sweeper_ready") == 1, timeout=30)
        assert sample(http_get(port, "/metrics")[1], "pod_sweeper_attached_tables") == 0
    finally:
        assert stop_process(proc) == 0, log.read_text()
