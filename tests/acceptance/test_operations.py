"""What operators see of a running daemon: /metrics moving as rows are processed, /readyz following
the database, and systemd's notify protocol on a socket the test owns."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from harness.postgres import ThrowawayCluster, free_port
from helpers import asleep_and_listening, daemon_env, http_get, run, sample, settings_for, wait_until
from pod_sweeper.store import db
from pod_sweeper.store.schema import migrations

pytestmark = pytest.mark.slow


def spawn(url: str, kubeconfig: Path, port: int, **env: str) -> subprocess.Popen[str]:
    environ = daemon_env(
        url,
        kubeconfig,
        POD_SWEEPER_HTTP_HOST="127.0.0.1",
        POD_SWEEPER_HTTP_PORT=str(port),
        POD_SWEEPER_CONNECT_TIMEOUT="1",
        **env,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "pod_sweeper", "run"],
        env=environ,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def seed(conn: psycopg.Connection[Any], kube: Any, n: int) -> None:
    for i in range(n):
        pod = kube.create_pod("sandboxes", f"p{i}")
        conn.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid)"
            " VALUES (%s, 1, 'sandboxes', %s, %s)",
            (f"s{i}", f"p{i}", uuid.UUID(pod["metadata"]["uid"])),
        )


def test_metrics_move_as_rows_are_processed(execs: psycopg.Connection[Any], db_url: str, kube: Any) -> None:
    seed(execs, kube, 20)
    kube.inject("status", method="DELETE", code=503, times=None)  # hold the rows back first
    port = free_port()
    # The 503s must not use up the attempt budget before they are cleared: with backoff under 2 s and
    # the default 10 attempts a row can go dead within ten seconds, about as long as the lag gauges
    # (refreshed every 5 s) may take to show the backlog on a busy machine.
    proc = spawn(
        db_url,
        kube.kubeconfig,
        port,
        POD_SWEEPER_BACKOFF_BASE="1",
        POD_SWEEPER_BACKOFF_MAX="2",
        POD_SWEEPER_MAX_ATTEMPTS="1000",
    )
    try:
        wait_until(lambda: http_get(port, "/readyz")[0] == 200, timeout=20, what="ready")
        # Ready comes before the replica sleeps: it listens, arms the flag and claims once more first,
        # and rows retired in that moment are claimed without a NOTIFY (the assertion on notify below
        # would then wait for nothing). Asleep: listening with the flag armed for half a second.
        armed_since: list[float] = []

        def asleep() -> bool:
            if not asleep_and_listening(execs):
                armed_since.clear()
                return False
            armed_since.append(time.monotonic())
            return armed_since[-1] - armed_since[0] > 0.5

        wait_until(asleep, timeout=20, what="the replica asleep")
        execs.execute("UPDATE executions SET active = false")
        wait_until(
            lambda: (sample(http_get(port, "/metrics")[1], "pod_sweeper_backoff_rows") or 0) > 0,
            timeout=20,
            what="the lag gauges to see rows in backoff",
        )
        text = http_get(port, "/metrics")[1]
        assert (sample(text, 'pod_sweeper_kube_responses_total{code="503"}') or 0) >= 1
        assert sample(text, 'pod_sweeper_outcomes_total{outcome="deleted"}') == 0  # nothing finished yet, and it says 0
        kube.clear_faults()
        wait_until(
            lambda: sample(http_get(port, "/metrics")[1], 'pod_sweeper_outcomes_total{outcome="deleted"}') == 20,
            timeout=30,
            what="20 deletes counted",
        )
        wait_until(
            lambda: sample(http_get(port, "/metrics")[1], 'pod_sweeper_outbox_rows{status="pending"}') == 0,
            timeout=20,
            what="the pending gauge to fall to 0",
        )
        text = http_get(port, "/metrics")[1]
        assert sample(text, "pod_sweeper_lag_seconds") == 0
        assert sample(text, 'pod_sweeper_build_info{pod_cluster="default",version="0.1.0"}') == 1
        assert sample(text, "pod_sweeper_listener_healthy") == 1
        assert (sample(text, "pod_sweeper_delete_duration_seconds_count") or 0) >= 20
        assert (sample(text, 'pod_sweeper_wakeups_total{source="notify"}') or 0) >= 1
        status, body = http_get(port, "/livez")
        assert (status, json.loads(body)["status"]) == (200, "ok")
    finally:
        stop(proc)


@pytest.fixture
def own_cluster(kube: Any) -> Iterator[ThrowawayCluster]:
    with ThrowawayCluster() as cluster:
        url = cluster.url("postgres")

        async def migrate() -> None:
            async with db.connection(settings_for(url)) as conn:
                await migrations.migrate(conn)

        run(migrate())
        yield cluster


def test_readyz_follows_the_database(own_cluster: ThrowawayCluster, kube: Any) -> None:
    port = free_port()
    proc = spawn(own_cluster.url("postgres"), kube.kubeconfig, port)
    try:
        wait_until(lambda: http_get(port, "/readyz")[0] == 200, timeout=20, what="ready")
        own_cluster.stop("fast")
        _, body = wait_until(
            lambda: (r := http_get(port, "/readyz"))[0] == 503 and "database" in r[1] and r,
            timeout=30,
            what="/readyz to turn 503 for the database",
        )
        assert json.loads(body)["status"] == "fail"
        assert http_get(port, "/livez")[0] == 200  # alive all the while: no restart for a database outage
        own_cluster.start()
        wait_until(lambda: http_get(port, "/readyz")[0] == 200, timeout=30, what="/readyz to return to 200")
    finally:
        stop(proc)


def test_not_ready_while_the_database_is_unreachable_at_start(kube: Any) -> None:
    port = free_port()
    proc = spawn(f"postgresql://x@127.0.0.1:{free_port()}/x", kube.kubeconfig, port)
    try:
        _, body = wait_until(lambda: (r := http_get(port, "/readyz"))[0] == 503 and r, timeout=20, what="503")
        assert "database" in json.loads(body)["reason"]
        assert http_get(port, "/livez")[0] == 200
    finally:
        stop(proc)


def test_systemd_notify_sequence(db_url: str, kube: Any, tmp_path: Path) -> None:
    address = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(20)
    proc = spawn(db_url, kube.kubeconfig, 0, NOTIFY_SOCKET=address, WATCHDOG_USEC="400000")
    messages: list[str] = []
    try:
        while not any("WATCHDOG=1" in m for m in messages):
            messages.append(sock.recv(4096).decode())
    finally:
        proc.send_signal(signal.SIGTERM)
    while not any("STOPPING=1" in m for m in messages):
        messages.append(sock.recv(4096).decode())
    proc.communicate(timeout=30)
    sock.close()
    assert proc.returncode == 0
    kinds = [next(line for line in m.splitlines() if "=" in line).split("=")[0] for m in messages]
    first = {k: kinds.index(k) for k in ("READY", "WATCHDOG", "STOPPING")}
    assert first["READY"] < first["WATCHDOG"] < first["STOPPING"], messages
    ready = next(m for m in messages if m.startswith("READY=1"))
    assert "STATUS=backlog" in ready
