"""The N / N+1 window on a running replica: it reads the schema again while it runs. A next release's
migration that declares this release readable is a log line and a gauge, and the replica sweeps on;
one that declares it too old stops its claims, visibly, until the schema is one it may run on again."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from helpers import DaemonThread, add_execution, daemon_settings, retire, row_for, wait_until
from pod_sweeper.store.schema import migrations
from pod_sweeper.tasks.loops import schema_watch


def test_a_running_replica_sweeps_on_beside_a_compatible_next_schema_and_stops_claiming_on_an_incompatible_one(
    execs: psycopg.Connection[Any], db_url: str, kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(schema_watch, "SCHEMA_WATCH_SECONDS", 0.2)
    known = migrations.expected_version()
    for sid in ("before", "during", "after"):
        add_execution(execs, kube, sid)
    with DaemonThread(daemon_settings(db_url, kube, poll_interval=0.5)) as replica:
        metrics = replica.daemon.metrics
        wait_until(lambda: metrics.value("pod_sweeper_schema_version", of="database") == known)
        assert metrics.value("pod_sweeper_schema_version", of="replica") == known
        # The next release's migrate runs beside it: an expand step that declares this release readable.
        with execs.transaction():
            execs.execute("ALTER TABLE pod_sweeper.outbox ADD COLUMN next_release_note text")
            execs.execute(
                "INSERT INTO pod_sweeper.schema_migrations (version, name, checksum, readable_from)"
                " VALUES (%s, 'next', %s, %s)",
                (known + 1, "0" * 64, known),
            )
        wait_until(lambda: metrics.value("pod_sweeper_schema_version", of="database") == known + 1)
        retire(execs, "before")
        wait_until(lambda: (row_for(execs, "before") or {}).get("outcome") == "deleted", what="swept beside it")
        assert metrics.value("pod_sweeper_schema_incompatible") == 0
        # A later one declares this release too old: no claim, not ready, the gauge says why.
        execs.execute(
            "UPDATE pod_sweeper.schema_migrations SET readable_from = %s WHERE version = %s", (known + 1, known + 1)
        )
        wait_until(lambda: metrics.value("pod_sweeper_schema_incompatible") == 1, what="the gate closed")
        ready, why = replica.daemon.health.readiness()
        assert not ready and "not claiming: the database's schema" in why and "upgrade pod-sweeper" in why
        claimer = replica.daemon.sweeper.claimer
        wait_until(lambda: claimer.gated, what="the claimer waiting on the schema gate")
        retire(execs, "during")
        assert (row_for(execs, "during") or {})["status"] == "pending"  # a gated claimer claims nothing
        execs.execute(
            "UPDATE pod_sweeper.schema_migrations SET readable_from = %s WHERE version = %s", (known, known + 1)
        )
        wait_until(lambda: metrics.value("pod_sweeper_schema_incompatible") == 0, what="the gate open again")
        wait_until(lambda: (row_for(execs, "during") or {}).get("outcome") == "deleted", what="claimed once fit")
        attempts = (row_for(execs, "during") or {})["attempts"]
        assert attempts == 1  # nothing was claimed (nor charged) while the gate was closed
