"""A sidecar never blocks its host: with ``POD_SWEEPER_ON_START_ERROR=wait`` (deploy/sidecar sets it),
``pod-sweeper run`` meets a start-up error a person must fix by staying up, answering ``/livez`` as
the sidecar's startupProbe asks, saying why on ``/readyz`` and in a gauge, repeating an ERROR line,
and healing once the cause is fixed, without a restart. The default (systemd's) still exits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import psycopg

from harness.postgres import free_port
from helpers import daemon_env, http_get, run, sample, settings_for, spawn_daemon, stop_process, wait_until
from pod_sweeper.store import db
from pod_sweeper.store.schema import migrations


def probe(port: int, path: str) -> tuple[int, dict[str, Any]] | None:
    """What the kubelet's httpGet probe would see; None while nothing listens."""
    status, body = http_get(port, path)
    if status == 0:
        return None
    return status, (json.loads(body) if path != "/metrics" else {"text": body})


def started_as_the_probe_sees_it(port: int) -> bool:
    seen = probe(port, "/livez")
    return seen is not None and seen[0] == 200


async def _migrate(url: str) -> None:
    async with db.connection(settings_for(url)) as conn:
        await migrations.migrate(conn)


def test_an_unmigrated_schema_keeps_the_sidecar_up_and_a_later_migrate_heals_it(
    empty_db_url: str, kube: Any, tmp_path: Path
) -> None:
    port = free_port()
    env = daemon_env(empty_db_url, kube.kubeconfig, POD_SWEEPER_HTTP_PORT=str(port), POD_SWEEPER_ON_START_ERROR="wait")
    log = tmp_path / "run.log"
    proc = spawn_daemon(env, log)
    try:
        wait_until(lambda: started_as_the_probe_sees_it(port), timeout=20, what="/livez 200, as the startupProbe asks")
        wait_until(lambda: len(re.findall("cannot start \\(schema\\)", log.read_text())) >= 2, timeout=20)
        status, body = probe(port, "/readyz") or (0, {})
        assert status == 503 and "cannot start: schema" in body["reason"] and "not migrated" in body["reason"]
        assert sample(probe(port, "/metrics")[1]["text"], 'pod_sweeper_start_error{kind="schema"}') == 1  # type: ignore[index]
        assert proc.poll() is None
        run(_migrate(empty_db_url))  # the migrate Job runs later: the same process heals
        wait_until(lambda: (probe(port, "/readyz") or (0,))[0] == 200, timeout=90, what="ready after the migrate")
        assert sample(probe(port, "/metrics")[1]["text"], 'pod_sweeper_start_error{kind="schema"}') == 0  # type: ignore[index]
    finally:
        assert stop_process(proc) == 0, log.read_text()
    assert "Traceback" not in log.read_text()


def test_a_bad_setting_keeps_the_sidecar_up_saying_which(db_url: str, kube: Any, tmp_path: Path) -> None:
    port = free_port()
    env = daemon_env(
        db_url,
        kube.kubeconfig,
        POD_SWEEPER_HTTP_PORT=str(port),
        POD_SWEEPER_ON_START_ERROR="wait",
        POD_SWEEPER_CONCURRENCY="many",
    )
    log = tmp_path / "run.log"
    proc = spawn_daemon(env, log)
    try:
        wait_until(lambda: started_as_the_probe_sees_it(port), timeout=20, what="/livez 200, as the startupProbe asks")
        wait_until(lambda: len(re.findall("invalid setting POD_SWEEPER_CONCURRENCY", log.read_text())) >= 2, timeout=20)
        status, body = probe(port, "/readyz") or (0, {})
        assert status == 503 and "cannot start: settings: invalid setting POD_SWEEPER_CONCURRENCY" in body["reason"]
        assert proc.poll() is None
    finally:
        assert stop_process(proc) == 0, log.read_text()
    assert "Traceback" not in log.read_text()


def test_an_unreadable_kubeconfig_and_an_unreachable_database_keep_it_up_too(db_url: str, tmp_path: Path) -> None:
    port = free_port()
    closed = free_port()  # nothing listens there
    env = daemon_env(
        f"postgresql://nobody@127.0.0.1:{closed}/x",
        tmp_path / "no-such-kubeconfig",
        POD_SWEEPER_HTTP_PORT=str(port),
        POD_SWEEPER_ON_START_ERROR="wait",
    )
    log = tmp_path / "run.log"
    proc = spawn_daemon(env, log)
    try:
        wait_until(lambda: started_as_the_probe_sees_it(port), timeout=20, what="/livez 200 with no kubeconfig")
        wait_until(lambda: "cannot start (kubeconfig)" in log.read_text(), timeout=20)
        kubeconfig = tmp_path / "no-such-kubeconfig"
        assert not kubeconfig.exists()
    finally:
        assert stop_process(proc) == 0, log.read_text()


def test_the_default_still_exits_for_systemd(empty_db_url: str, kube: Any, tmp_path: Path) -> None:
    env = daemon_env(empty_db_url, kube.kubeconfig)
    log = tmp_path / "run.log"
    proc = spawn_daemon(env, log)
    assert proc.wait(30) == 3
    assert "not migrated" in log.read_text()
    with psycopg.connect(empty_db_url) as conn:
        assert conn.execute("SELECT to_regnamespace('pod_sweeper')").fetchone() == (None,)
