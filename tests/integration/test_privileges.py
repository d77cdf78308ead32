"""Least privilege: writers of the host table need no right on our schema and cannot enqueue by hand;
the daemon runs end to end as a migration-free runtime role that can do no DDL."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from helpers import (
    DaemonThread,
    add_execution,
    attach_table,
    claim_params,
    clean_env,
    cli,
    create_executions,
    daemon_settings,
    outbox,
    run,
    settings_for,
    wait_until,
)
from pod_sweeper.store import db
from pod_sweeper.store.schema import migrations, roles
from pod_sweeper.store.sweep import presence
from pod_sweeper.store.sweep.presence import Beat

pytestmark = pytest.mark.versions


def as_role(url: str, role: str, password: str = "pw") -> str:
    return make_conninfo(url, user=role, password=password)


@pytest.fixture
def role_names(pg: psycopg.Connection[Any]) -> Any:
    suffix = uuid.uuid4().hex[:8]
    names = {"writer": f"writer_{suffix}", "runtime": f"runtime_{suffix}"}
    yield names
    for name in names.values():
        if not pg.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
            continue
        pg.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
        pg.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_writers_need_no_rights_on_our_schema_and_cannot_enqueue(
    pg: psycopg.Connection[Any], db_url: str, role_names: dict[str, str]
) -> None:
    create_executions(pg)
    run(attach_table(db_url))
    writer = role_names["writer"]
    pg.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'pw'").format(sql.Identifier(writer)))
    pg.execute(
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON public.executions TO {}").format(sql.Identifier(writer))
    )
    with psycopg.connect(as_role(db_url, writer), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
            " VALUES ('s', 1, 'ns', 'p', gen_random_uuid())"
        )
        conn.execute("UPDATE executions SET active = false")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT pod_sweeper.enqueue(1, 'x', 1, 'ns', 'victim', gen_random_uuid(), 'retired')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM pod_sweeper.outbox")
    assert [r["sandbox_id"] for r in outbox(pg)] == ["s"]


def test_daemon_runs_as_the_runtime_role(
    pg: psycopg.Connection[Any], db_url: str, kube: Any, role_names: dict[str, str]
) -> None:
    create_executions(pg)
    run(attach_table(db_url))
    runtime = role_names["runtime"]

    async def grant() -> None:
        async with db.connection(settings_for(db_url)) as conn:
            for statement in await roles.runtime_grants(
                conn, runtime, create=True, verifier=roles.password_verifier(conn, runtime, "pw")
            ):
                await conn.execute(statement)

    run(grant())
    runtime_url = as_role(db_url, runtime)
    add_execution(pg, kube, "a")
    add_execution(pg, kube, "b")
    pg.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name,"
        " pod_uid, reason, status, outcome, done_at) VALUES (1, 'old', 1, 'ns', 'old', gen_random_uuid(),"
        " 'retired', 'done', 'deleted', '2000-01-01')"
    )
    # A labelled pod nothing accounts for: the reconciliation pass must be able to enqueue it too.
    labels = {"sandbox": "orphan", "generation": "1"}
    kube.create_pod("sandboxes", "orphan", labels=labels, created=datetime.now(UTC) - timedelta(hours=1))
    settings = settings_for(
        runtime_url,
        kubeconfig=kube.kubeconfig,
        poll_interval=30,
        rate_limit_qps=0,
        retention=3600,
        reconcile_sandbox_label="sandbox",
        reconcile_generation_label="generation",
        reconcile_namespace="sandboxes",
        reconcile_interval=0.2,
        reconcile_quarantine=0.1,
    )
    with DaemonThread(settings):
        started = time.monotonic()
        pg.execute("UPDATE executions SET active = false WHERE sandbox_id = 'a'")
        wait_until(lambda: any(r["sandbox_id"] == "a" and r["status"] == "done" for r in outbox(pg)))
        assert time.monotonic() - started < 2  # NOTIFY reaches the runtime role's listener too
        pg.execute("UPDATE executions SET active = true WHERE sandbox_id = 'b'")
        wait_until(lambda: all(r["sandbox_id"] != "old" for r in outbox(pg)), what="retention as runtime role")
        wait_until(lambda: kube.get_pod("sandboxes", "orphan") is None, what="reconciliation as runtime role")
    assert kube.get_pod("sandboxes", "pod-a-1") is None
    attempts = pg.execute("SELECT count(*) AS n FROM pod_sweeper.attempts").fetchone()
    assert attempts is not None and attempts["n"] == 2  # a's delete and the orphan's

    async def try_ddl() -> None:
        async with db.connection(settings_for(runtime_url)) as conn:
            await conn.execute("CREATE TABLE pod_sweeper.sneaky (x int)")

    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        run(try_ddl())
    with psycopg.connect(runtime_url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("SELECT state FROM executions")  # only the mapped columns are readable

    async def migrate_as_runtime() -> Any:
        async with db.connection(settings_for(runtime_url)) as conn:
            return await migrations.check_schema(conn)

    assert run(migrate_as_runtime()) == migrations.expected_version()  # it can check, not change


def test_migration_0003_converts_functions_attached_before_it(empty_db_url: str, role_names: dict[str, str]) -> None:
    from pod_sweeper.store.schema.migrations import shipped

    first_two = [m for m in shipped() if m.version <= 2]
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA pod_sweeper")
        for migration in first_two:
            conn.execute(migration.text)  # type: ignore[call-overload]
        create_executions(conn)
        # An attach of that era: the function runs as the writer.
        conn.execute(
            "INSERT INTO pod_sweeper.attachments (table_schema, table_name, column_map)"
            " VALUES ('public', 'executions', '{}')"
        )
        conn.execute(
            "CREATE FUNCTION pod_sweeper.enqueue_1() RETURNS trigger LANGUAGE plpgsql AS"
            " $$BEGIN PERFORM pod_sweeper.enqueue(1, NEW.sandbox_id, NEW.generation, NEW.pod_namespace,"
            " NEW.pod_name, NEW.pod_uid, 'retired'); RETURN NEW; END$$"
        )
        conn.execute(
            "CREATE TRIGGER t AFTER UPDATE ON executions FOR EACH ROW WHEN (NOT NEW.active)"
            " EXECUTE FUNCTION pod_sweeper.enqueue_1()"
        )
        conn.execute(migrations.shipped()[2].text)  # type: ignore[call-overload]
        definer = conn.execute("SELECT prosecdef FROM pg_proc WHERE proname = 'enqueue_1'").fetchone()
        assert definer == (True,)
        writer = role_names["writer"]
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(writer)))
        conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE ON executions TO {}").format(sql.Identifier(writer)))
        conn.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
            " VALUES ('s', 1, 'ns', 'p', gen_random_uuid())"
        )
    with psycopg.connect(as_role(empty_db_url, writer), autocommit=True) as conn:
        conn.execute("UPDATE executions SET active = false")  # would fail without the conversion
    with psycopg.connect(empty_db_url) as conn:
        assert conn.execute("SELECT count(*) FROM pod_sweeper.outbox").fetchone() == (1,)
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(writer)))


def test_migrations_0011_0019_and_0020_give_an_upgraded_runtime_role_what_a_replica_needs(
    empty_db_url: str, role_names: dict[str, str]
) -> None:
    """A runtime role granted before migration 0011 claims and trips the breaker after it, without
    `grant --apply` again: the claim reads the pauses and holds, a trip writes the audit trail."""
    from pod_sweeper.store import queries
    from pod_sweeper.store.schema.migrations import shipped

    runtime = role_names["runtime"]
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA pod_sweeper")
        for migration in (m for m in shipped() if m.version <= 10):
            conn.execute(migration.text)  # type: ignore[call-overload]
        # What `grant` gave a runtime role before 0011 (the parts the claim and a trip use).
        who = sql.Identifier(runtime)
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'pw'").format(who))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA pod_sweeper TO {}").format(who))
        conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON pod_sweeper.outbox TO {}").format(who))
        conn.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE ON pod_sweeper.wakeup, pod_sweeper.breaker TO {}").format(who)
        )
        conn.execute("INSERT INTO pod_sweeper.breaker (cluster) VALUES ('default') ON CONFLICT DO NOTHING")
        conn.execute(next(m for m in shipped() if m.version == 11).text)  # type: ignore[call-overload]
        # The rest of the chain, as the owner (this release's claim reads what 0014 added).
        for migration in (m for m in shipped() if m.version > 11):
            for text in [text for _, text in migration.steps] or [migration.text]:
                conn.execute(text)  # type: ignore[call-overload]
    params = claim_params()
    with psycopg.connect(as_role(empty_db_url, runtime), autocommit=True) as conn:
        conn.execute(queries.load("claim"), params)  # reads pod_sweeper.pauses and pod_sweeper.holds
        trip = {"cluster": "default", "reason": "a burst", "who": "r"}
        conn.execute(queries.load("breaker_trip"), trip)  # writes the audit trail
        assert conn.execute("SELECT count(*) FROM pod_sweeper.audit").fetchone() == (1,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM pod_sweeper.audit")
        # 0019 and 0020 grant the same role what a replica writes there: its heartbeat's row, a large
        # transaction its claim keeps back, and retention's prune of ended ones.
        beat = Beat("r", "h", "0", 20, "default", None, False, None, None, 100.0, 8, True, {}, 10.0, 1.0)
        run(_as(as_role(empty_db_url, runtime), lambda c: presence.beat(c, beat)))
        kept = {"cluster": "default", "at": "2026-01-01T00:00:00Z", "rows": 600, "reason": "big", "who": "r"}
        assert conn.execute(queries.load("large_transaction_keep"), kept).fetchone() is not None
        conn.execute(queries.load("large_transaction_prune"), {"keep_seconds": 3600})
        assert conn.execute("SELECT count(*) FROM pod_sweeper.replicas").fetchone() == (1,)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(runtime)))


async def _as(url: str, step: Any) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        await step(conn)


def test_grant_takes_the_password_from_a_file_or_stdin_and_sends_only_a_scram_verifier(
    pg: psycopg.Connection[Any], db_url: str, tmp_path: Any
) -> None:
    """``grant --create`` never takes the password on the command line, and the statements it sends
    hold a SCRAM verifier computed by libpq, never the password: no server log of statements can."""
    password = "Gr4nt-s3cret"
    role = f"runtime_{uuid.uuid4().hex[:8]}"
    secret = tmp_path / "password"
    secret.write_text(password + "\n")
    try:
        shown = cli("grant", role, "--create", "--password-file", str(secret), url=db_url)
        assert shown.returncode == 0 and password not in shown.stdout + shown.stderr
        assert "PASSWORD 'SCRAM-SHA-256$...'" in shown.stdout

        async def statements() -> list[str]:
            async with db.connection(settings_for(db_url)) as conn:
                verifier = roles.password_verifier(conn, role, password)
                done = await roles.runtime_grants(conn, role, create=True, verifier=verifier)
                return [s.as_string(conn) for s in done]

        sent = run(statements())
        assert sent[0].startswith(f'CREATE ROLE "{role}" LOGIN PASSWORD \'SCRAM-SHA-256$4096:')
        assert all(password not in text for text in sent)
        applied = subprocess.run(
            [sys.executable, "-m", "pod_sweeper", "grant", role, "--create", "--password-file", "-", "--apply"],
            input=password + "\n",
            env=clean_env(POD_SWEEPER_DATABASE_URL=db_url),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert applied.returncode == 0, applied.stderr
        stored = pg.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (role,)).fetchone()
        assert stored is not None and stored["rolpassword"].startswith("SCRAM-SHA-256$")
        with psycopg.connect(make_conninfo(db_url, user=role, password=password)) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (role,)
        refused = cli("grant", role, "--create", "--password", password, url=db_url)
        assert refused.returncode == 2 and password not in refused.stderr  # no such flag any more
    finally:
        pg.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
        pg.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_managed_install_without_a_superuser_each_role_doing_its_part(empty_db_url: str, kube: Any) -> None:
    """As on a managed PostgreSQL: an administrator (the test's superuser) only makes roles and gives
    CREATE on the database; the schema's owner migrates, attaches (as a member of the host table's
    owning role) and grants; the runtime role sweeps; detach and re-attach need no more."""
    suffix = uuid.uuid4().hex[:8]
    owner, app, runtime = f"sweeper_owner_{suffix}", f"app_{suffix}", f"runtime_{suffix}"
    dbname = psycopg.conninfo.conninfo_to_dict(empty_db_url)["dbname"]
    with psycopg.connect(empty_db_url, autocommit=True) as admin:
        for role in (owner, app, runtime):
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(str(dbname)), sql.Identifier(owner))
        )
        admin.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(app)))
    try:
        with psycopg.connect(as_role(empty_db_url, app), autocommit=True) as conn:
            create_executions(conn)  # the host's table, owned by its application's role
        as_owner = as_role(empty_db_url, owner)
        migrated = cli("migrate", url=as_owner)
        assert migrated.returncode == 0, migrated.stderr
        refused = cli("attach", "--table", "public.executions", url=as_owner)
        assert refused.returncode == 2, refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert f"GRANT {app} TO {owner}" in line and "permission denied" in line
        refused = cli("migrate", url=as_role(empty_db_url, runtime))
        assert refused.returncode == 1 and "it needs the schema's owner" in refused.stderr
        with psycopg.connect(empty_db_url, autocommit=True) as admin:
            admin.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(app), sql.Identifier(owner)))
        for args in (("attach", "--table", "public.executions"), ("grant", runtime, "--apply")):
            done = cli(*args, url=as_owner)
            assert done.returncode == 0, (args, done.stderr)
        with psycopg.connect(as_role(empty_db_url, app), autocommit=True) as conn:
            conn.row_factory = psycopg.rows.dict_row
            add_execution(conn, kube, "m1")
            with DaemonThread(daemon_settings(as_role(empty_db_url, runtime), kube)):
                conn.execute("UPDATE executions SET active = false WHERE sandbox_id = 'm1'")
                wait_until(lambda: kube.get_pod("sandboxes", "pod-m1-1") is None, what="swept by the runtime role")
        for args in (("detach", "--table", "public.executions"), ("attach", "--table", "public.executions")):
            done = cli(*args, url=as_owner)
            assert done.returncode == 0, (args, done.stderr)
    finally:
        with psycopg.connect(empty_db_url, autocommit=True) as admin:
            admin.execute("DROP SCHEMA IF EXISTS pod_sweeper CASCADE")
            admin.execute("DROP TABLE IF EXISTS public.executions")
            for role in (runtime, owner, app):
                admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_replica_whose_role_is_not_granted_yet_waits_not_ready_and_starts_once_granted(
    pg: psycopg.Connection[Any], db_url: str, kube: Any, role_names: dict[str, str]
) -> None:
    """A first install: the replicas may start before anyone has run ``grant``. With
    ``on_start_error=wait`` (the chart's and deploy/'s setting) the replica stays up, not ready, saying
    which grant to run, and starts by itself once it has been run; with ``exit`` it exits 3 in one line."""
    create_executions(pg)
    run(attach_table(db_url))
    runtime = role_names["runtime"]
    pg.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'pw'").format(sql.Identifier(runtime)))
    runtime_url = as_role(db_url, runtime)

    refused = cli("run", url=runtime_url, POD_SWEEPER_KUBECONFIG=str(kube.kubeconfig), POD_SWEEPER_HTTP_PORT="0")
    assert refused.returncode == 3, refused.stderr
    line = refused.stderr.strip().splitlines()[-1]
    assert "Traceback" not in refused.stderr and line.startswith("pod-sweeper: "), refused.stderr
    assert f"role {runtime} lacks a privilege on schema pod_sweeper" in line, line
    assert f"`pod-sweeper grant {runtime} --apply`" in line, line

    settings = settings_for(runtime_url, kubeconfig=kube.kubeconfig, on_start_error="wait", poll_interval=30)
    replica = DaemonThread(settings).start(ready=None)
    try:
        health = replica.daemon.health
        wait_until(lambda: health.start_error is not None, what="the start error")
        ready, why = health.readiness()
        assert not ready and f"privileges: role {runtime} lacks a privilege" in why and "[start_error]" in why, why
        assert replica.daemon.metrics.start_error.labels("privileges")._value.get() == 1

        granted = cli("grant", runtime, "--apply", url=db_url)
        assert granted.returncode == 0, granted.stderr
        wait_until(lambda: replica.daemon.ready, timeout=60, what="ready once granted")
        assert replica.rc is None  # the same process: it was never restarted
        assert replica.daemon.metrics.start_error.labels("privileges")._value.get() == 0
        add_execution(pg, kube, "a")
        pg.execute("UPDATE executions SET active = false WHERE sandbox_id = 'a'")
        wait_until(lambda: kube.get_pod("sandboxes", "pod-a-1") is None, what="the sweep as the granted role")
    finally:
        replica.stop()


def test_migrate_grant_gives_the_runtime_role_its_privileges_after_migrating(
    pg: psycopg.Connection[Any], empty_db_url: str, role_names: dict[str, str]
) -> None:
    """The chart's hook: ``migrate --grant ROLE`` on an empty database, as the owner, leaves the role
    able to run (its check passes) and writes the grant to the audit trail; run again, it changes nothing."""
    runtime = role_names["runtime"]
    pg.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'pw'").format(sql.Identifier(runtime)))
    for _ in range(2):
        done = cli("migrate", "--grant", runtime, "--actor", "helm hook", url=empty_db_url)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == f"granted the runtime privileges to {runtime}", done.stdout
    checked = cli("check", url=as_role(empty_db_url, runtime), POD_SWEEPER_KUBECONFIG="/nonexistent")
    assert "lacks" not in checked.stdout + checked.stderr
    with psycopg.connect(empty_db_url) as conn:
        trail = conn.execute("SELECT actor, command FROM pod_sweeper.audit ORDER BY id").fetchall()
    assert trail[-2:] == [("helm hook", "grant")] * 2, trail
    dry = cli("migrate", "--dry-run", "--grant", runtime, url=empty_db_url)
    assert dry.returncode == 0 and dry.stdout.splitlines()[-1] == f"would grant the runtime privileges to {runtime}"
    with psycopg.connect(empty_db_url, autocommit=True) as conn:  # the role is dropped from the other database
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(runtime)))
