"""The helpers every test tier shares (the one module tests import them from; conftest.py holds only
fixtures and hooks): running the package's coroutines, settings for a test database, the reference
executions table, outbox reads, the daemon in a thread or a subprocess, and waiting on conditions."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from harness.kubeapiserver import KubeApiServer
from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.settings import DEFAULT_CLUSTER, Settings
from pod_sweeper.demo.reference import executions_ddl
from pod_sweeper.store import db
from pod_sweeper.store.admin import attach
from pod_sweeper.store.rows import ClaimedBatch
from pod_sweeper.store.sweep import outbox as transitions
from pod_sweeper.store.sweep.recheck import load_attachments
from pod_sweeper.tasks.rules import verdicts

# Set on a test that asked for the real API server at run time (see ``real_kube``): its failure report
# shows the server's log.
USED_KUBE = pytest.StashKey[bool]()


def run(coro: Any) -> Any:
    """Run one coroutine of the package to completion (the tests themselves are synchronous)."""
    return asyncio.run(coro)


def with_dbname(url: str, dbname: str) -> str:
    return make_conninfo(url, dbname=dbname)


# The blast-radius breaker, every rule of it, off: throughput tests retire thousands in one transaction.
BREAKER_OFF: dict[str, Any] = {"max_deletes_per_minute": 0, "breaker_surge_factor": 0, "breaker_transaction_rows": 0}
BREAKER_OFF_ENV = {f"POD_SWEEPER_{key.upper()}": str(value) for key, value in BREAKER_OFF.items()}


def settings_for(url: str, **overrides: Any) -> Settings:
    # The blast-radius breaker is off unless a test turns it on: throughput tests would trip it. Events
    # too: the request logs the tests assert on then hold the pods' calls alone (tests/integration/
    # test_events.py and tests/realkube turn them on).
    return Settings(**{"database_url": url, "http_port": 0, "events": False, **BREAKER_OFF, **overrides})


def real_kube(request: pytest.FixtureRequest) -> KubeApiServer:
    """The session's real API server, for a fixture that decides at run time whether it needs it."""
    request.node.stash[USED_KUBE] = True
    server: KubeApiServer = request.getfixturevalue("kube_apiserver")
    return server


async def claim(
    conn: db.Connection,
    *,
    owner: str = "t",
    batch: int = 100,
    lease_seconds: float = 30,
    max_attempts: int = 5,
    disarm: bool = True,
    cluster: str = DEFAULT_CLUSTER,
    transaction_rows: int = 0,
) -> ClaimedBatch:
    """One claim as the daemon's claimer makes it (the answer table deciding what the claim ends)."""
    policy = verdicts.Policy(max_attempts, Backoff(1.0, 1.0))
    return await transitions.claim(
        conn,
        cluster=cluster,
        owner=owner,
        batch=batch,
        lease_seconds=lease_seconds,
        attachments=await load_attachments(conn),
        disarm=disarm,
        at_claim=lambda c, checked: verdicts.at_claim(c, checked, policy),
        transaction_rows=transaction_rows,
    )


def create_executions(conn: psycopg.Connection[Any], table: str = "public.executions") -> None:
    schema, name = table.split(".")
    conn.execute(executions_ddl(schema, name))


async def attach_table(
    url: str, table: str = "public.executions", columns: list[str] | None = None, *, cluster: str | None = None
) -> int:
    async with db.connection(Settings(database_url=url, http_port=0)) as conn:
        return await attach.attach(
            conn, attach.parse_table(table), attach.parse_mapping(columns or []), cluster=cluster
        )


def outbox(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    return list(cur.execute("SELECT * FROM pod_sweeper.outbox ORDER BY id").fetchall())


def wait_until(predicate: Any, *, timeout: float = 10.0, interval: float = 0.01, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        threading_event_wait(interval)


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without its POD_SWEEPER_* (and systemd) variables, ``extra`` on top."""
    import os

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("POD_SWEEPER_", "NOTIFY_", "WATCHDOG_"))}
    return {**environ, **extra}


def cli(*args: str, url: str | None = None, timeout: float = 30, python_flags: tuple[str, ...] = (), **env: str) -> Any:
    """The real ``pod-sweeper`` command as a subprocess, run to its end (a CompletedProcess)."""
    import subprocess
    import sys

    environ = clean_env(**({"POD_SWEEPER_DATABASE_URL": url} if url else {}), **env)
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "pod_sweeper", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=timeout,
        check=False,
    )


def http_get(port: int, path: str) -> tuple[int, str]:
    """A daemon's answer on ``path``: (status, body); (0, "") when nothing answers (not up yet)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def sample(text: str, name: str) -> float | None:
    """The first sample of ``name`` (a bare name, or with its labels) in a /metrics text; None if absent."""
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def stop_process(proc: Any, timeout: float = 30) -> int | None:
    """SIGTERM, then its exit code; killed when it has not exited within ``timeout`` seconds."""
    import subprocess

    if proc.poll() is None:
        proc.terminate()
        try:
            return int(proc.wait(timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode  # type: ignore[no-any-return]


def spawn_daemon(env: dict[str, str], log: Any) -> Any:
    """``pod-sweeper run`` as a subprocess with ``env``, its stdout and stderr in the file ``log``."""
    import subprocess
    import sys

    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pod_sweeper", "run"], env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )


def threading_event_wait(seconds: float) -> None:
    """A poll interval that is a wait on an event, not a bare sleep in the test body."""
    import threading

    threading.Event().wait(seconds)


def daemon_env(url: str, kubeconfig: Any, **overrides: str) -> dict[str, str]:
    """The environment of a ``pod-sweeper run`` subprocess in a test: the caller's environment without
    its POD_SWEEPER_* (and systemd) variables, fast test pacing, and ``overrides`` on top."""
    environ = clean_env()
    environ.update(
        {
            "POD_SWEEPER_DATABASE_URL": url,
            "POD_SWEEPER_KUBECONFIG": str(kubeconfig),
            "POD_SWEEPER_HTTP_PORT": "0",
            "POD_SWEEPER_POLL_INTERVAL": "1",
            "POD_SWEEPER_BACKOFF_BASE": "0.1",
            "POD_SWEEPER_BACKOFF_MAX": "0.5",
            "POD_SWEEPER_RATE_LIMIT_QPS": "0",
            **BREAKER_OFF_ENV,
            "POD_SWEEPER_EVENTS": "false",  # as settings_for: the request logs hold the pods' calls
            **overrides,
        }
    )
    return environ


class DaemonThread:
    """The real daemon (``pod_sweeper.tasks.process.runner.Daemon``) on its own thread and event loop, for tests that
    need to look inside it; tests of signals and exit codes run the CLI as a subprocess instead."""

    def __init__(self, settings: Settings) -> None:
        import threading

        self.settings = settings
        self.rc: int | None = None
        self.daemon: Any = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="daemon-under-test", daemon=True)

    def _main(self) -> None:
        import asyncio

        from pod_sweeper.tasks.process.runner import Daemon

        async def body() -> int:
            self.loop = asyncio.get_running_loop()
            self.daemon = Daemon(self.settings, handle_signals=False)
            self._started.set()
            return await self.daemon.run()

        try:
            self.rc = asyncio.run(body())
        finally:
            self._started.set()

    def start(self, *, ready: bool | None = True) -> DaemonThread:
        """Start it and wait until it is ready (or, with ``ready=False``, until it is running: a
        daemon held back by a tripped breaker is running but, rightly, not ready; with ``ready=None``,
        until the process exists: one that waits on a start error never runs)."""
        self._thread.start()
        self._started.wait(10)
        wait_until(
            lambda: (
                self.rc is not None
                or (
                    self.daemon is not None
                    and (ready is None or (self.daemon.ready if ready else self.daemon.sweeper is not None))
                )
            ),
            what="the daemon to become ready" if ready else "the daemon to run",
        )
        return self

    def stop(self, timeout: float = 30) -> int | None:
        if self.rc is None and self.daemon is not None:
            self.loop.call_soon_threadsafe(self.daemon.stop_requested.set)
        self._thread.join(timeout)
        return self.rc

    def __enter__(self) -> DaemonThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def add_execution(
    conn: psycopg.Connection[Any],
    kube: Any,
    sid: str,
    *,
    gen: int = 1,
    namespace: str = "sandboxes",
    node_name: str | None = None,
    active: bool = True,
) -> str:
    """A pod on the fake API server and the execution row that records its UID; returns the UID."""
    pod = kube.create_pod(namespace, f"pod-{sid}-{gen}", labels={"sandbox": sid}, node_name=node_name)
    conn.execute(
        "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (sid, gen, namespace, pod["metadata"]["name"], pod["metadata"]["uid"], active),
    )
    return str(pod["metadata"]["uid"])


def seed_executions(conn: psycopg.Connection[Any], kube: Any, n: int, *, namespace: str = "sandboxes") -> list[str]:
    """``n`` active executions ``s0..`` with pods ``p0..`` on the fake API server, in one COPY; returns
    the pod names."""
    names = []
    with (
        conn.cursor() as cur,
        cur.copy("COPY executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid) FROM STDIN") as copy,
    ):
        for i in range(n):
            pod = kube.create_pod(namespace, f"p{i}")
            names.append(pod["metadata"]["name"])
            copy.write_row((f"s{i}", 1, namespace, pod["metadata"]["name"], uuid.UUID(pod["metadata"]["uid"])))
    return names


def claim_params(**overrides: Any) -> dict[str, Any]:
    """The parameters of sql/claim.sql for a test's own claim: ten rows of the default cluster from the
    start of the claim index, owned by ``r``, a minute's lease, the wakeup flag left alone."""
    from pod_sweeper.store.sweep.cursor import START

    params: dict[str, Any] = {
        "batch": 10,
        "owner": "r",
        "lease_seconds": 60,
        "disarm": False,
        "cluster": "default",
        "guard": None,
        "floor": START,
        "disarm_after": 0.0,
        "transaction_rows": 0,
        "gathering": False,
    }
    return {**params, **overrides}


def row_for(conn: psycopg.Connection[Any], sid: str) -> dict[str, Any] | None:
    cur = conn.cursor(row_factory=psycopg.rows.dict_row)
    return cur.execute("SELECT * FROM pod_sweeper.outbox WHERE sandbox_id = %s", (sid,)).fetchone()


def daemon_settings(db_url: str, kube: Any, **overrides: Any) -> Settings:
    """Settings for a daemon under test against ``kube`` (an API server with a ``kubeconfig``, or a
    kubeconfig's path): a 30 s poll (anything faster than that was a NOTIFY, or the short poll while the
    wakeup flag cannot be armed), short backoffs, no rate limit."""
    from pathlib import Path

    values: dict[str, Any] = {
        "kubeconfig": kube if isinstance(kube, Path) else kube.kubeconfig,
        "poll_interval": 30.0,
        "lease_seconds": 10.0,
        "request_timeout": 2.0,
        "backoff_base": 0.05,
        "backoff_max": 0.2,
        "rate_limit_qps": 0,
        "shutdown_timeout": 5.0,
        "max_attempts": 5,
        "replica_id": "test-replica",
    }
    values.update(overrides)
    return settings_for(db_url, **values)


def listeners(conn: psycopg.Connection[Any]) -> int:
    """Replicas listening on this database (so a retire now reaches them by NOTIFY). The listener's
    session shows in pg_stat_activity as soon as it connects, before its LISTEN has run; its last
    statement says it has (the listener sends nothing else on that connection while it waits)."""
    cur = conn.cursor(row_factory=psycopg.rows.tuple_row)
    (n,) = cur.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = 'pod-sweeper-listener' AND datname = current_database()"
        " AND state = 'idle' AND query ILIKE 'LISTEN %'"
    ).fetchone() or (0,)
    return int(n)


def asleep_and_listening(conn: psycopg.Connection[Any]) -> bool:
    """A replica listens and has armed the wakeup flag: the next retire NOTIFYs it (and nothing else
    would find the row before its poll)."""
    cur = conn.cursor(row_factory=psycopg.rows.tuple_row)
    (armed,) = cur.execute("SELECT armed FROM pod_sweeper.wakeup").fetchone() or (False,)
    return bool(armed) and listeners(conn) > 0


def sleeping(daemon: DaemonThread) -> bool:
    """The daemon's claimer sleeps and its listener listens: the next retire reaches it by NOTIFY alone.
    (The claimer says it is asleep just before it waits, having armed the wakeup flag and claimed once
    more after that; ready alone is not enough: it comes after the catch-up claim, which can run before
    the LISTEN has.)"""
    d = daemon.daemon
    if d.sweeper is None or d.listener is None or not d.listener.healthy:
        return False
    # Asleep, and no wakeup waiting: the listener's first LISTEN wakes the claimer to catch up ("listen"),
    # and a claimer that has not taken that wakeup yet is about to claim again, with a poll's right to
    # take the wakeup flag over (a retire meanwhile would then wake it, not the one the flag named).
    return d.sweeper.status.asleep and not d.sweeper.claimer.wake.is_set()


def retire(conn: psycopg.Connection[Any], sid: str) -> None:
    """Retire every generation of sandbox ``sid`` in the reference executions table."""
    conn.execute("UPDATE executions SET active = false WHERE sandbox_id = %s", (sid,))


def record_pod(conn: psycopg.Connection[Any], pod: dict[str, Any], sid: str, *, active: bool = True) -> None:
    """The execution row that records a pod's UID (``pod`` as the API server returned it), as the control
    plane writes it after the create."""
    meta = pod["metadata"]
    conn.execute(
        "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
        " VALUES (%s, 1, %s, %s, %s, %s)",
        (sid, meta["namespace"], meta["name"], meta["uid"], active),
    )
