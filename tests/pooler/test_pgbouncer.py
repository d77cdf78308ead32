"""pod-sweeper through a real PgBouncer in ``pool_mode = transaction``, with a pool of 3 server
connections shared by more clients than that: concurrent migrates, every command, two poll-only
replicas sweeping, and an unrelated client of the same pool that must never see anything of ours."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from harness.postgres import free_port
from helpers import (
    DaemonThread,
    add_execution,
    clean_env,
    cli,
    daemon_env,
    daemon_settings,
    http_get,
    retire,
    sample,
    seed_executions,
    sleeping,
    spawn_daemon,
    wait_until,
)
from pod_sweeper.store.schema.migrations import shipped
from pooler.bouncer import PgBouncer


def ready(port: int) -> bool:
    return sample(http_get(port, "/metrics")[1], "pod_sweeper_ready") == 1


def advisory_locks(direct_url: str) -> int:
    with psycopg.connect(direct_url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
        return int(row[0]) if row else -1


def test_three_concurrent_migrates_succeed_and_leave_no_lock(empty_db_url: str, pgbouncer: PgBouncer) -> None:
    url = pgbouncer.url(empty_db_url)
    environ = clean_env(POD_SWEEPER_DATABASE_URL=url, POD_SWEEPER_TRANSACTION_POOLER="true")
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pod_sweeper", "migrate"],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [(p.wait(60), *p.communicate()) for p in procs]
    assert all(rc == 0 for rc, _, _ in results), results
    applied = sum(int(m[1]) for _, out, _ in results if (m := re.search(r"applied (\d+) migration", out)))
    assert applied == len(shipped())
    with psycopg.connect(empty_db_url) as conn:
        ledger = conn.execute("SELECT version FROM pod_sweeper.schema_migrations ORDER BY 1").fetchall()
    assert [v for (v,) in ledger] == [m.version for m in shipped()]
    assert advisory_locks(empty_db_url) == 0
    again = cli(
        "migrate", url=url, POD_SWEEPER_TRANSACTION_POOLER="true"
    )  # the next migrate is not blocked by anything left behind
    assert (again.returncode, again.stdout.strip()) == (0, "schema is up to date"), again.stderr


def test_every_command_works_through_the_pooler(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, pgbouncer: PgBouncer
) -> None:
    url = pgbouncer.url(db_url)
    kubeconfig = str(kube.kubeconfig)
    # A retire from before attach, for backfill: detach, retire, attach again through the pooler.
    pooled = {"url": url, "POD_SWEEPER_TRANSACTION_POOLER": "true"}
    assert cli("detach", "--table", "public.executions", **pooled).returncode == 0
    seed_executions(execs, kube, 3)
    execs.execute("UPDATE executions SET active = false WHERE sandbox_id = 's0'")
    steps = [
        ("attach", "--table", "public.executions"),
        ("backfill",),
        ("status", "--json"),
        ("retry", "--dead"),
        ("prune",),
        ("check", "--namespace", "sandboxes"),
        ("migrate",),
        ("sql", "lag"),
    ]
    for step in steps:
        result = cli(*step, url=url, POD_SWEEPER_TRANSACTION_POOLER="true", POD_SWEEPER_KUBECONFIG=kubeconfig)
        assert result.returncode == 0, (step, result.stdout, result.stderr)
        assert "prepared statement" not in result.stderr, (step, result.stderr)
    rows = execs.execute("SELECT sandbox_id, status FROM pod_sweeper.outbox").fetchall()
    assert [(r["sandbox_id"], r["status"]) for r in rows] == [("s0", "pending")]  # backfilled
    assert advisory_locks(db_url) == 0


class UnrelatedClient(threading.Thread):
    """Another application on the same pool: it looks at its session before and inside each transaction
    and writes down anything that is not the server's default, until told to stop."""

    SHOWN = ("idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout", "search_path")

    def __init__(self, url: str) -> None:
        super().__init__(name="unrelated-client", daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.rounds = 0
        self.seen: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True, prepare_threshold=None, row_factory=dict_row) as conn:
                defaults = self._look(conn)
                while not self.stop.is_set():
                    if (outside := self._look(conn)) != defaults:
                        self.seen.append(f"outside a transaction: {outside}")
                    with conn.transaction():
                        if (inside := self._look(conn)) != defaults:
                            self.seen.append(f"in a transaction: {inside}")
                    self.rounds += 1
                    self.stop.wait(0.005)
        except BaseException as exc:
            self.error = exc

    def _look(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        seen = {name: conn.execute(f"SHOW {name}").fetchone() for name in self.SHOWN}
        prepared = conn.execute("SELECT count(*) AS n FROM pg_prepared_statements").fetchone()
        locks = conn.execute(
            "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        ).fetchone()
        return {**seen, "prepared": prepared, "advisory_locks_of_this_session": locks}


def test_two_poll_only_replicas_sweep_everything_and_the_pool_stays_clean(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, pgbouncer: PgBouncer, tmp_path: Path
) -> None:
    url = pgbouncer.url(db_url)
    n = 60
    seed_executions(execs, kube, n)
    neighbour = UnrelatedClient(url)
    neighbour.start()
    replicas: list[tuple[subprocess.Popen[str], int, Path]] = []
    for name in ("pooled-a", "pooled-b"):
        port = free_port()
        log = tmp_path / f"{name}.log"
        env = daemon_env(
            url,
            kube.kubeconfig,
            POD_SWEEPER_TRANSACTION_POOLER="true",
            POD_SWEEPER_REPLICA_ID=name,
            POD_SWEEPER_HTTP_PORT=str(port),
            POD_SWEEPER_HTTP_HOST="127.0.0.1",
            POD_SWEEPER_BATCH_SIZE="5",
            POD_SWEEPER_CONCURRENCY="2",
            POD_SWEEPER_LOG_FORMAT="json",
        )
        replicas.append((spawn_daemon(env, log), port, log))
    try:
        for proc, port, log in replicas:
            wait_until(
                lambda p=proc, q=port: (
                    p.poll() is None and sample(http_get(q, "/metrics")[1], "pod_sweeper_ready") == 1
                ),
                timeout=60,
                what=f"replica on port {port} ready ({log.read_text()[-500:]})",
            )
        # Slow DELETEs and small claims, so that one replica cannot take the whole backlog at once.
        kube.inject("delay", method="DELETE", seconds=0.1, times=None)
        execs.execute("UPDATE executions SET active = false")
        done = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done' AND outcome = 'deleted'"
        wait_until(lambda: execs.execute(done).fetchone()["n"] == n, timeout=60, what="every retired pod deleted")
        texts = [http_get(port, "/metrics")[1] for _, port, _ in replicas]
    finally:
        neighbour.stop.set()
        neighbour.join(10)
        for proc, _, _ in replicas:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(30) for proc, _, _ in replicas]
    logs = [log.read_text() for _, _, log in replicas]
    assert codes == [0, 0], logs
    assert execs.execute("SELECT count(*) AS n FROM pod_sweeper.outbox").fetchone()["n"] == n
    assert sorted(d.path for d in kube.deletes() if d.status == 200) == sorted(set(d.path for d in kube.deletes()))
    # Both replicas took part, and neither saw a database error.
    assert all(sample(t, "pod_sweeper_claimed_rows_total") > 0 for t in texts), texts
    assert [sample(t, "pod_sweeper_db_errors_total") for t in texts] == [0, 0]
    for text in logs:
        entries = [json.loads(line) for line in text.splitlines()]
        assert [e for e in entries if e["level"] not in ("DEBUG", "INFO")] == [], text  # not one warning
        assert any(e.get("mode") == "poll only (transaction_pooler and no listen_database_url)" for e in entries)
    # The neighbour on the same pool never saw a setting, a prepared statement or a lock of ours.
    assert neighbour.error is None, neighbour.error
    assert neighbour.rounds > 20 and neighbour.seen == []
    assert advisory_locks(db_url) == 0


def test_a_direct_listen_url_keeps_notify_wakeups_behind_the_pooler(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, pgbouncer: PgBouncer
) -> None:
    """With a 30 s poll, a retire swept within seconds was woken by NOTIFY: LISTEN took the direct route
    while every other statement went through the pooler."""
    settings = daemon_settings(
        pgbouncer.url(db_url), kube, transaction_pooler=True, listen_database_url=db_url, poll_interval=30.0
    )
    with DaemonThread(settings) as daemon:
        add_execution(execs, kube, "woken")
        # Asleep, not just ready: a retire right after start is found by the claim that follows the
        # arming, with no NOTIFY needed (CI saw that once).
        wait_until(lambda: sleeping(daemon), what="the replica asleep and listening")
        retire(execs, "woken")
        done = "SELECT status FROM pod_sweeper.outbox WHERE sandbox_id = 'woken'"
        wait_until(lambda: (row := execs.execute(done).fetchone()) and row["status"] == "done", timeout=10)
        assert daemon.daemon.metrics.value("pod_sweeper_wakeups_total", source="notify") >= 1
        listeners = execs.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'pod-sweeper-listener'"
            " AND query ILIKE 'LISTEN%'"
        ).fetchone()
        assert listeners["n"] == 1
    checked = cli(
        "check",
        "--namespace",
        "sandboxes",
        url=pgbouncer.url(db_url),
        POD_SWEEPER_TRANSACTION_POOLER="true",
        POD_SWEEPER_KUBECONFIG=str(kube.kubeconfig),
        POD_SWEEPER_LISTEN_DATABASE_URL=db_url,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "wakeups: LISTEN/NOTIFY (direct, listen_database_url) with poll backstop" in checked.stdout
    assert "listen database: connected, LISTEN works" in checked.stdout
