"""Every reason a row waits (``core.waits``), provoked for real on a running replica, and seen on every
surface its rule names: ``explain`` names it on the row and ``status`` counts it per cluster (the real
CLI, run from an environment with the database URL alone, as an on-call's shell: a replica's settings,
such as the guard's standbys, are read from its row in pod_sweeper.replicas), ``pod_sweeper_waiting_rows``
carries it as a label value (rows the database sees), ``pod_sweeper_waiting`` (what the replica knows)
and the replica's row (what ``status`` lists), readiness follows its rule, a log line marks its start
and another its end. A reason added to core.waits without a case here fails
``test_every_reason_has_a_case``, so none ships without its surfaces."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from loguru import logger

from helpers import DaemonThread, add_execution, cli, daemon_settings, retire, row_for, wait_until
from pod_sweeper.core.waits import RULES, Seen, Wait
from pod_sweeper.store import queries
from pod_sweeper.store.schema import migrations
from pod_sweeper.tasks.loops import presence, refresher, schema_watch
from pod_sweeper.tasks.process import runner

MISSING_STANDBY = "no-such-standby"


@dataclass
class Env:
    execs: psycopg.Connection[Any]
    kube: Any
    db_url: str


def _insert(
    env: Env,
    *,
    status: str,
    due_in: str,
    cluster: str = "default",
    claimed_by: str | None = None,
    last_http_status: int | None = None,
) -> None:
    """An open row of ``cluster`` for pod sandboxes/pod-a-1, due in ``due_in`` (an interval; enqueued then
    if that is past, else now), that no replica would act on unprompted."""
    env.execs.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason, status, next_attempt_at, enqueued_at, cluster, claimed_by, claimed_at, last_http_status)"
        " VALUES (1, 'a', 1, 'sandboxes', 'pod-a-1', gen_random_uuid(), 'retired', %(status)s,"
        " now() + %(due_in)s::interval, least(now(), now() + %(due_in)s::interval), %(cluster)s, %(claimed_by)s,"
        " CASE WHEN %(claimed_by)s::text IS NOT NULL THEN now() END, %(last_http_status)s)",
        {
            "status": status,
            "due_in": due_in,
            "cluster": cluster,
            "claimed_by": claimed_by,
            "last_http_status": last_http_status,
        },
    )


def _close(env: Env) -> None:
    """The row taken away (done), which ends any reason that kept only it."""
    env.execs.execute(
        "UPDATE pod_sweeper.outbox SET status = 'done', outcome = 'discarded', done_at = now(), claimed_by = NULL"
        " WHERE sandbox_id = 'a'"
    )


def _retire(env: Env) -> None:
    retire(env.execs, "a")


def _cli(env: Env, *args: str) -> None:
    result = cli(*args, url=env.db_url)
    assert result.returncode == 0, result.stderr


def _schema_ahead(env: Env) -> None:
    known = migrations.expected_version()
    env.execs.execute(
        "INSERT INTO pod_sweeper.schema_migrations (version, name, checksum, readable_from)"
        " VALUES (%s, 'next', %s, %s)",
        (known + 1, "0" * 64, known + 1),
    )


@dataclass
class Case:
    provoke: Callable[[Env], None]
    end: Callable[[Env], None] | None  # None: it ends with the process (a setting)
    settings: dict[str, Any] = field(default_factory=dict)
    cluster: str = "default"  # whose rows it keeps
    before: Callable[[Env], None] | None = None  # before the replica starts
    migrated: bool = True  # False: the replica starts on a database not migrated (a start error)
    started: tuple[str, str] | None = None  # the log lines, when not core.waits' own ("waiting started ...")
    rows: int = 1  # the rows it keeps


CASES: dict[Wait, Case] = {
    Wait.CLAIMED: Case(
        lambda env: _insert(env, status="claimed", due_in="1 hour", claimed_by="other-replica"),
        _close,
    ),
    Wait.HELD: Case(
        lambda env: (_cli(env, "hold", "sandboxes/pod-a-1", "--reason", "forensics"), _retire(env)),
        lambda env: _cli(env, "release", "sandboxes/pod-a-1"),
    ),
    Wait.PAUSED: Case(
        lambda env: (_cli(env, "pause", "--reason", "incident"), _retire(env)),
        lambda env: _cli(env, "unpause"),
    ),
    Wait.LARGE_TRANSACTION: Case(
        lambda env: (
            add_execution(env.execs, env.kube, "b"),
            env.execs.execute("UPDATE executions SET active = false WHERE sandbox_id IN ('a', 'b')"),
        ),
        lambda env: _cli(env, "release-transaction", _large_transaction(env), "--yes"),
        settings={"breaker_transaction_rows": 2},  # the breaker on: one host transaction of two is large
        rows=2,
    ),
    Wait.BREAKER: Case(
        lambda env: (
            env.execs.execute(
                "UPDATE pod_sweeper.breaker SET tripped_at = now(), tripped_by = 'test', reason = 'provoked'"
                " WHERE cluster = 'default'"
            ),
            _retire(env),
        ),
        lambda env: _cli(env, "reset-breaker", "--cluster", "default"),
        settings={"max_deletes_per_minute": 1000},  # the breaker on (the tests' settings turn it off)
    ),
    Wait.REPLICATION_GUARD: Case(_retire, _close, settings={"replication_guard": frozenset({MISSING_STANDBY})}),
    Wait.KUBE_UNREACHABLE: Case(
        lambda env: (env.kube.inject("status", code=503, times=None), _retire(env)),
        lambda env: env.kube.clear_faults(),
    ),
    Wait.KUBE_UNAUTHORIZED: Case(
        lambda env: (env.kube.inject("status", code=401, method="DELETE", times=None), _retire(env)),
        lambda env: env.kube.clear_faults(),
        settings={"backoff_base": 3.0, "backoff_max": 5.0},
    ),
    Wait.NAMESPACE_REFUSED: Case(
        lambda env: (env.kube.denied.add(("delete", "sandboxes")), _retire(env)),
        lambda env: env.kube.denied.clear(),
        settings={"backoff_base": 3.0, "backoff_max": 5.0},
    ),
    Wait.SCHEMA: Case(
        lambda env: (_schema_ahead(env), _retire(env)),
        lambda env: env.execs.execute("DELETE FROM pod_sweeper.schema_migrations WHERE name = 'next'"),
    ),
    Wait.START_ERROR: Case(
        lambda env: None,
        lambda env: runner_migrate(env.db_url),
        settings={"on_start_error": "wait"},
        migrated=False,
        started=("cannot start (schema)", "schema: fixed; starting"),
    ),
    Wait.BACKOFF: Case(
        lambda env: _insert(env, status="pending", due_in="1 hour", last_http_status=500),
        _close,
    ),
    Wait.DRY_RUN: Case(lambda env: None, None, settings={"dry_run": True}),
    Wait.UNSWEPT: Case(
        lambda env: _insert(env, status="pending", due_in="-2 minutes", cluster="east"),
        _close,
        cluster="east",
    ),
}


def _large_transaction(env: Env) -> str:
    """The id of the large transaction the claim found (``status`` lists it)."""
    row = env.execs.execute("SELECT id FROM pod_sweeper.large_transactions WHERE ended_at IS NULL").fetchone()
    assert row is not None
    return str(row["id"])


def _dba_replicas(db_url: str) -> dict[str, dict[str, str]]:
    """sql/dba/replicas.sql (`pod-sweeper sql replicas`), run as a DBA's psql would: each replica's waits."""
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        return {r["replica"]: dict(r["waits"]) for r in conn.execute(queries.load("dba/replicas")).fetchall()}


def _row_waits(db_url: str, daemon: Any) -> dict[str, str] | None:
    """The reasons a replica's row in pod_sweeper.replicas says it sees now (None: no row)."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT waits FROM pod_sweeper.replicas WHERE replica = %s", (daemon.settings.replica_id,)
        ).fetchone()
    return None if row is None else dict(row[0])


def runner_migrate(url: str) -> None:
    result = cli("migrate", url=url)
    assert result.returncode == 0, result.stderr


def test_every_reason_has_a_case() -> None:
    assert set(CASES) == set(Wait)


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), format="{message}", level="INFO")
    yield lines
    logger.remove(sink)


def _logged(lines: list[str], text: str) -> bool:
    return any(text in line for line in list(lines))


@pytest.mark.parametrize("wait", list(Wait), ids=[w.value for w in Wait])
def test_each_reason_is_seen_on_every_surface_while_it_holds_and_ends(
    wait: Wait,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    kube: Any,
    log_lines: list[str],
) -> None:
    case, rule = CASES[wait], RULES[wait]
    monkeypatch.setattr(runner, "GAUGE_REFRESH_SECONDS", 0.2)
    monkeypatch.setattr(schema_watch, "SCHEMA_WATCH_SECONDS", 0.2)
    monkeypatch.setattr(presence, "PRESENCE_SECONDS", 1.0)
    monkeypatch.setattr(refresher, "PINNED_AFTER_SECONDS", 3600.0)
    db_url: str = request.getfixturevalue("db_url" if case.migrated else "empty_db_url")
    execs: psycopg.Connection[Any] | None = request.getfixturevalue("execs") if case.migrated else None
    env = Env(execs, kube, db_url)  # type: ignore[arg-type]
    if execs is not None:
        add_execution(execs, kube, "a")
    settings = daemon_settings(db_url, kube, poll_interval=0.5, **case.settings)
    replica = DaemonThread(settings)
    if case.migrated:
        replica.start(ready=False)
    else:
        replica.start(ready=None)
    try:
        daemon = replica.daemon
        case.provoke(env)
        if rule.seen in (Seen.ROW, Seen.BOTH):
            wait_until(
                lambda: (
                    daemon.metrics.value("pod_sweeper_waiting_rows", pod_cluster=case.cluster, reason=wait.value)
                    == case.rows
                ),
                timeout=20,
                what=f"pod_sweeper_waiting_rows{{reason={wait.value}}}",
            )
            said = cli("explain", "sandboxes/pod-a-1", url=db_url)
            assert said.returncode == 0 and f"waits [{wait.value}]: {rule.what}" in said.stdout, said.stdout
            shown = cli("status", url=db_url).stdout
            table = shown.split("why open rows wait", 1)[1].split("\n\n", 1)[0]
            assert any(line.split()[:3] == [case.cluster, wait.value, str(case.rows)] for line in table.splitlines()), (
                shown
            )
        if rule.seen in (Seen.REPLICA, Seen.BOTH):
            wait_until(
                lambda: daemon.metrics.value("pod_sweeper_waiting", reason=wait.value) == 1,
                timeout=20,
                what=f"pod_sweeper_waiting{{reason={wait.value}}}",
            )
            _, why = daemon.health.readiness()
            assert (f"[{wait.value}]" in why) is (not rule.ready), why
            if wait is not Wait.START_ERROR:  # a replica that cannot start writes no row: it is not sweeping
                wait_until(
                    lambda: _row_waits(db_url, daemon) is not None and wait.value in _row_waits(db_url, daemon),
                    timeout=20,
                    what=f"{wait.value} in the replica's row",
                )
            if wait not in (Wait.START_ERROR, Wait.SCHEMA):  # (the CLI refuses a schema ahead of its release)
                listed = json.loads(cli("status", "--json", url=db_url).stdout)["replicas"]
                [mine] = [r for r in listed if r["replica"] == settings.replica_id]
                assert wait.value in mine["waits"] and mine["state"] == "live", mine
            if wait is not Wait.START_ERROR:  # the DBA's query, as psql runs it, says what the replica says
                assert wait.value in _dba_replicas(db_url)[settings.replica_id]
        started, ended = case.started or (
            f"[{wait.value}]: {rule.what}",
            f"waiting ended ({'this replica' if rule.seen is not Seen.ROW else 'cluster ' + case.cluster}):"
            f" [{wait.value}]",
        )
        if not rule.routine:
            wait_until(lambda: _logged(log_lines, started), timeout=20, what=f"the log line: {started}")
            assert sum(started in line for line in log_lines) == 1 or case.started, "logged once, not per refresh"

        if case.end is None:
            return
        case.end(env)
        if rule.seen in (Seen.ROW, Seen.BOTH):
            wait_until(
                lambda: (
                    daemon.metrics.value("pod_sweeper_waiting_rows", pod_cluster=case.cluster, reason=wait.value) == 0
                ),
                timeout=40,
                what="the row gauge back to 0",
            )
        if rule.seen in (Seen.REPLICA, Seen.BOTH):
            wait_until(
                lambda: daemon.metrics.value("pod_sweeper_waiting", reason=wait.value) == 0,
                timeout=40,
                what="the replica's gauge back to 0",
            )
        if not rule.routine:
            wait_until(lambda: _logged(log_lines, ended), timeout=20, what=f"the log line: {ended}")
        if case.migrated and wait is not Wait.CLAIMED and wait is not Wait.UNSWEPT and execs is not None:
            wait_until(lambda: (row_for(execs, "a") or {}).get("status") == "done", timeout=40, what="swept after")
    finally:
        replica.stop()
