"""``pod-sweeper run`` as a subprocess, sent real signals: graceful stop, SIGKILL and takeover, a
database that is not there yet, and start-up refusals with their exit codes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from helpers import daemon_env, seed_executions, wait_until


def spawn(url: str, kubeconfig: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pod_sweeper", "run"],
        env=daemon_env(url, kubeconfig, **{"POD_SWEEPER_REQUEST_TIMEOUT": "3", **env}),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute("SELECT status, count(*) AS n FROM pod_sweeper.outbox GROUP BY 1").fetchall()
    return {r["status"]: r["n"] for r in rows}


def test_sigterm_finishes_in_flight_hands_back_the_rest_and_exits_0(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    seed_executions(execs, kube, 40)
    kube.inject("delay", method="DELETE", seconds=0.5, times=None)
    proc = spawn(
        db_url,
        kube.kubeconfig,
        POD_SWEEPER_CONCURRENCY="4",
        POD_SWEEPER_BATCH_SIZE="4",
        POD_SWEEPER_SHUTDOWN_TIMEOUT="5",
    )
    execs.execute("UPDATE executions SET active = false")
    wait_until(lambda: len(kube.deletes()) >= 4, what="deletes in flight")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped cleanly" in err
    c = counts(execs)
    assert c.get("claimed", 0) == 0 and c.get("done", 0) >= 4
    handed = execs.execute("SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'pending' AND attempts <> 0")
    assert handed.fetchone()["n"] == 0  # nothing handed back was charged
    # Every DELETE the server answered 200 is recorded as done: no finished work was lost.
    assert sum(1 for d in kube.deletes() if d.status == 200) == c.get("done", 0)


def test_sigkill_mid_batch_then_a_new_process_takes_over_the_expired_leases(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    seed_executions(execs, kube, 30)
    kube.inject("delay", method="DELETE", seconds=1.0, times=None)
    first = spawn(db_url, kube.kubeconfig, POD_SWEEPER_LEASE_SECONDS="5", POD_SWEEPER_CONCURRENCY="8")
    execs.execute("UPDATE executions SET active = false")
    wait_until(lambda: counts(execs).get("claimed", 0) >= 8 and kube.deletes(), what="a claimed batch in flight")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    stranded = counts(execs).get("claimed", 0)
    assert stranded > 0
    kube.clear_faults()
    second = spawn(db_url, kube.kubeconfig, POD_SWEEPER_LEASE_SECONDS="5", POD_SWEEPER_REPLICA_ID="second")
    try:
        wait_until(lambda: counts(execs) == {"done": 30}, timeout=30, what="every row done after the takeover")
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=20)
    assert second.returncode == 0
    outcomes = execs.execute("SELECT outcome, count(*) AS n FROM pod_sweeper.outbox GROUP BY 1").fetchall()
    assert {r["outcome"] for r in outcomes} <= {"deleted", "absent"}  # absent: the killed one's DELETE landed
    assert kube.pods == {}
    taken_over = execs.execute("SELECT count(*) AS n FROM pod_sweeper.outbox WHERE attempts = 2").fetchone()["n"]
    assert taken_over == stranded  # each lease taken over was charged once more


def _attempt_lines(proc: subprocess.Popen[str], n: int) -> tuple[list[str], str]:
    """Stderr lines until ``n`` retry lines have come, then SIGTERM: (every line, the rest)."""
    lines: list[str] = []
    assert proc.stderr is not None
    deadline = time.monotonic() + 20
    while len([line for line in lines if "(attempt " in line]) < n and time.monotonic() < deadline:
        lines.append(proc.stderr.readline())
    assert proc.poll() is None  # still running, not crash-looping
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=20)
    assert proc.returncode == 0
    return lines, rest


def test_unreachable_database_at_start_keeps_retrying_not_crashing(kube: Any) -> None:
    from harness.postgres import free_port

    port = free_port()
    proc = spawn(
        f"postgresql://app:s3cret@127.0.0.1:{port}/x",
        kube.kubeconfig,
        POD_SWEEPER_CONNECT_TIMEOUT="1",
        POD_SWEEPER_BACKOFF_BASE="0.1",
    )
    lines, rest = _attempt_lines(proc, 2)
    attempts = [line for line in lines if "(attempt " in line]
    assert "attempt 1" in attempts[0] and "attempt 2" in attempts[1]
    assert f"Connection refused (at 127.0.0.1:{port})" in attempts[0]
    assert "s3cret" not in "".join(lines) + rest


@pytest.mark.parametrize(
    ("user", "dbname", "cause"),
    [
        ("nosuchuser", None, 'FATAL: role "nosuchuser" does not exist'),
        (None, "nosuchdb", 'FATAL: database "nosuchdb" does not exist'),
    ],
    ids=["no-such-role", "no-such-database"],
)
def test_a_refusing_database_is_retried_with_its_cause_on_one_line_per_attempt(
    pg_server_url: str, kube: Any, user: str | None, dbname: str | None, cause: str
) -> None:
    proc = spawn(
        make_conninfo(pg_server_url, user=user, dbname=dbname), kube.kubeconfig, POD_SWEEPER_BACKOFF_BASE="0.1"
    )
    lines, rest = _attempt_lines(proc, 3)
    logged = [line for line in lines + rest.splitlines() if line.strip()]
    attempts = [line for line in logged if "(attempt " in line]
    assert len(attempts) >= 3 and all(cause in line for line in attempts), attempts
    # One line per attempt: nothing else says the same thing again (the pool is opened only once a
    # connection works, so its own warnings do not repeat the story).
    assert [line for line in logged if "does not exist" in line] == attempts


def test_unmigrated_schema_exits_3(empty_db_url: str, kube: Any) -> None:
    proc = spawn(empty_db_url, kube.kubeconfig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3
    assert err.strip().splitlines()[-1] == (
        "pod-sweeper: schema pod_sweeper is not migrated in this database: run `pod-sweeper migrate`"
    )


@pytest.mark.parametrize(
    "content", [None, "{not yaml: [", '{"apiVersion": "v1", "clusters": []}'], ids=["missing", "malformed", "empty"]
)
def test_bad_kubeconfig_exits_2_with_one_line(db_url: str, tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    proc = spawn(db_url, path)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("pod-sweeper: ") and "kube" in last.lower()
    assert "Traceback" not in err


def test_second_signal_exits_at_once(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    seed_executions(execs, kube, 5)
    kube.inject("hang", method="DELETE", seconds=60, times=None)
    proc = spawn(
        db_url,
        kube.kubeconfig,
        POD_SWEEPER_SHUTDOWN_TIMEOUT="30",
        POD_SWEEPER_REQUEST_TIMEOUT="20",
        POD_SWEEPER_LEASE_SECONDS="60",
    )
    execs.execute("UPDATE executions SET active = false")
    wait_until(lambda: kube.deletes(), what="a hanging DELETE")
    proc.send_signal(signal.SIGTERM)
    assert proc.stderr is not None
    while "SIGTERM: stopping" not in proc.stderr.readline():  # the graceful stop has begun
        assert proc.poll() is None
    # It now waits on the hanging DELETE, up to its 30 s deadline; a second signal cuts that short.
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=10)
    assert time.monotonic() - started < 5
    assert proc.returncode == 1


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_port_in_use_is_one_line_and_exit_2_in_the_configured_format(db_url: str, kube: Any, log_format: str) -> None:
    import json
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = spawn(
            db_url,
            kube.kubeconfig,
            POD_SWEEPER_HTTP_PORT=str(port),
            POD_SWEEPER_HTTP_HOST="127.0.0.1",
            POD_SWEEPER_LOG_FORMAT=log_format,
        )
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    lines = err.strip().splitlines()
    assert "Traceback" not in err
    last = lines[-1]
    if log_format == "json":
        assert [json.loads(line)["level"] for line in lines][-1] == "CRITICAL"
        last = json.loads(last)["msg"]
    assert last.startswith(f"pod-sweeper: cannot serve /metrics and the probes on 127.0.0.1:{port}")
    assert "POD_SWEEPER_HTTP_PORT" in last


def test_head_on_the_health_paths_answers_like_get(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    import http.client

    from harness.postgres import free_port
    from helpers import DaemonThread, daemon_settings

    port = free_port()
    with DaemonThread(daemon_settings(db_url, kube, http_port=port, http_host="127.0.0.1")):
        for path in ("/livez", "/readyz", "/metrics", "/nope"):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            got = conn.getresponse()
            body = got.read()
            conn.request("HEAD", path)
            head = conn.getresponse()
            assert (head.status, head.read()) == (got.status, b""), path
            assert head.getheader("Content-Type") == got.getheader("Content-Type")
            if path != "/metrics":  # the metrics text changes between two scrapes
                assert int(head.getheader("Content-Length") or -1) == len(body)
            conn.close()
