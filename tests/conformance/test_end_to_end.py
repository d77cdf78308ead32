"""One sweep end to end against the same API server as the conformance tests (real or fake): pods
created through the API, executions recorded with their UIDs, half of them retired; the daemon must
delete exactly the retired pods."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from conformance.apiserver import ApiServer
from helpers import DaemonThread, daemon_settings, retire, wait_until


def test_the_daemon_deletes_exactly_the_retired_pods(
    execs: psycopg.Connection[Any], db_url: str, api: ApiServer
) -> None:
    uids: dict[str, str] = {}
    for i in range(6):
        pod = api.pod(f"sweep-{i}", labels={"sandbox": f"s{i}"})
        uids[f"s{i}"] = pod.metadata.uid
        execs.execute(
            "INSERT INTO executions (sandbox_id, generation, pod_namespace, pod_name, pod_uid, active)"
            " VALUES (%s, 1, %s, %s, %s, true)",
            (f"s{i}", api.namespace, f"sweep-{i}", uuid.UUID(pod.metadata.uid)),
        )
    settings = daemon_settings(db_url, api, request_timeout=5.0, lease_seconds=15.0)
    with DaemonThread(settings):
        for sid in ("s0", "s1", "s2"):
            retire(execs, sid)
        query = "SELECT pod_name, status, outcome FROM pod_sweeper.outbox ORDER BY pod_name"
        finished = "SELECT count(*) AS n FROM pod_sweeper.outbox WHERE status = 'done'"
        wait_until(lambda: execs.execute(finished).fetchone()["n"] == 3, timeout=30, what="three rows done")
        done = execs.execute(query).fetchall()
    assert all(api.read(f"sweep-{i}") is None for i in range(3))
    assert [(r["pod_name"], r["status"], r["outcome"]) for r in done] == [
        (f"sweep-{i}", "done", "deleted") for i in range(3)
    ]
    for i in range(3, 6):
        kept = api.read(f"sweep-{i}")
        assert kept is not None and kept.metadata.uid == uids[f"s{i}"] and kept.metadata.deletion_timestamp is None
