"""Who sweeps, known to the database (issue 52): each running replica keeps its row in
pod_sweeper.replicas (written on its heartbeat, marked at a clean stop, stale after three missed beats,
forgotten an hour later), and ``status`` and ``explain``, run as an on-call would from a shell with the
database URL alone (the real CLI, every POD_SWEEPER_ variable of the test's own environment removed),
read the replicas' settings from there: two live replicas with different replication guards are shown
replica by replica, a cluster whose replicas all stopped is the first thing ``status`` says, and a
replica of an older release at work there (one that keeps no row) is named rather than "no replica"."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from helpers import DaemonThread, add_execution, cli, daemon_settings, retire, row_for, wait_until
from pod_sweeper.tasks.loops import presence

MISSING = "no-such-standby"  # a named standby that is not connected: the guard holds every row


@pytest.fixture(autouse=True)
def _fast_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(presence, "PRESENCE_SECONDS", 1.0)  # stale after 9 s: a busy machine reads live


def _replicas(db_url: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        rows = conn.execute("SELECT r.*, pod_sweeper.replica_state(r) AS state FROM pod_sweeper.replicas AS r")
        return {r["replica"]: r for r in rows.fetchall()}


def _status(db_url: str) -> dict[str, Any]:
    said = cli("status", "--json", url=db_url)
    assert said.returncode == 0, said.stderr
    return dict(json.loads(said.stdout))


def test_a_replica_keeps_its_row_while_it_runs_and_marks_it_stopped_at_a_clean_stop(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    settings = daemon_settings(db_url, kube, replica_id="east-a", cluster="east", dry_run_namespaces="shadow")
    with DaemonThread(settings):
        wait_until(lambda: _replicas(db_url).get("east-a", {}).get("ready") is True, what="its row, ready")
        row = _replicas(db_url)["east-a"]
        assert (row["cluster"], row["state"], row["dry_run"], row["dry_run_namespaces"], row["guard"]) == (
            "east",
            "live",
            False,
            ["shadow"],
            None,
        )
        assert (
            row["heartbeat_seconds"] == 1.0 * presence.REFRESH_LOOKS
            and row["schema_version"] >= 19
            and row["stopped_at"] is None
        )
        seen = row["seen_at"]
        wait_until(lambda: _replicas(db_url)["east-a"]["seen_at"] > seen, what="a second heartbeat")
        shown = _status(db_url)
        assert [(w["cluster"], w["live_replicas"], w["unswept"]) for w in shown["sweepers"]] == [
            ("default", 0, False),
            ("east", 1, False),
        ]
    row = _replicas(db_url)["east-a"]
    assert row["state"] == "stopped" and row["ready"] is False and row["stopped_at"] is not None


def test_a_replica_gone_without_a_word_reads_stale_and_is_forgotten_an_hour_later(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        for name, seen in (("gone-a", "31 seconds"), ("gone-b", "61 minutes"), ("here", "1 second")):
            conn.execute(
                "INSERT INTO pod_sweeper.replicas (replica, host, release, schema_version, cluster, dry_run,"
                " rate_limit, concurrency, ready, heartbeat_seconds, started_at, seen_at)"
                " VALUES (%s, 'h', '0', 19, 'default', false, 100, 8, true, 10, now(), now() - %s::interval)",
                (name, seen),
            )
    states = {name: r["state"] for name, r in _replicas(db_url).items()}
    assert states == {"gone-a": "stale", "gone-b": "stale", "here": "live"}

    from helpers import run, settings_for
    from pod_sweeper.store import db
    from pod_sweeper.store.sweep import presence as rows

    async def beat() -> None:  # any replica's heartbeat deletes the rows an hour gone
        async with db.connection(settings_for(db_url)) as conn:
            await rows.beat(
                conn,
                rows.Beat("here", "h", "0", 19, "default", None, False, None, None, 100.0, 8, True, {}, 10.0, 1.0),
            )

    run(beat())
    assert set(_replicas(db_url)) == {"gone-a", "here"}


def test_two_replicas_with_different_guards_are_shown_replica_by_replica_from_a_shell_with_the_url_alone(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    """A rolling change of the guard's standbys: the two live replicas name different ones (neither
    connected, so both hold the row). From a shell with the database URL alone the row reads
    replication_guard with both standby lists, explain lists each replica's guard, status says they
    disagree and shows each guard's state."""
    add_execution(execs, kube, "a")
    old = daemon_settings(db_url, kube, replica_id="old-guard", replication_guard=frozenset({MISSING}))
    new = daemon_settings(db_url, kube, replica_id="new-guard", replication_guard=frozenset({"standby-b"}))
    with DaemonThread(old), DaemonThread(new):
        wait_until(lambda: {"old-guard", "new-guard"} <= set(_replicas(db_url)), what="both rows")
        retire(execs, "a")
        wait_until(lambda: (row_for(execs, "a") or {}).get("guard_lsn") is not None, timeout=20, what="the mark")
        said = cli("explain", "sandboxes/pod-a-1", url=db_url).stdout
        assert "waits [replication_guard]" in said and f"{MISSING}; standby-b" in said, said
        assert "the live replicas of cluster default disagree on replication guard" in said, said
        assert (
            "old-guard (" in said and f"replication guard {MISSING}" in said and "replication guard standby-b" in said
        )
        shown = _status(db_url)
        assert shown["disagreements"] == {"default": ["replication guard"]}, shown["disagreements"]
        assert sorted(g["standbys"][0] for g in shown["replication_guard"]) == [MISSING, "standby-b"]
        text = cli("status", url=db_url).stdout
        assert "the live replicas (cluster default) disagree on replication guard" in text, text
    text = cli("status", url=db_url).stdout
    assert "disagree" not in text  # both stopped: nothing live to disagree


def test_a_guarded_row_reads_held_from_a_bare_shell_and_each_surface_agrees_with_the_replica(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    add_execution(execs, kube, "a")
    settings = daemon_settings(db_url, kube, replica_id="guarded", replication_guard=frozenset({MISSING}))
    with DaemonThread(settings) as replica:
        retire(execs, "a")
        daemon = replica.daemon
        wait_until(lambda: "replication_guard" in daemon.health.waits(), timeout=20, what="the replica's own view")
        said = cli("explain", "sandboxes/pod-a-1", url=db_url).stdout
        assert "waits [replication_guard]" in said and f"standbys named by its replicas' guard: {MISSING}" in said
        shown = _status(db_url)
        assert [(w["cluster"], w["reason"], w["rows"]) for w in shown["waiting"]] == [
            ("default", "replication_guard", 1)
        ]
        [guard] = shown["replication_guard"]
        assert (guard["cluster"], guard["standbys"], guard["missing"], guard["kept_back_rows"]) == (
            "default",
            [MISSING],
            1,
            1,
        )
        wait_until(lambda: "replication_guard" in _replicas(db_url)["guarded"]["waits"], what="the replica's row")
    # The replica stopped: its row still says what guard the next one is likely to run with.
    said = cli("explain", "sandboxes/pod-a-1", url=db_url).stdout
    assert "waits [replication_guard]" in said and "no live replica of cluster default is known" in said, said


def test_a_cluster_whose_replicas_all_stopped_is_what_status_says_first(
    execs: psycopg.Connection[Any], db_url: str, kube: Any
) -> None:
    with DaemonThread(daemon_settings(db_url, kube, replica_id="east-a", cluster="east")):
        wait_until(lambda: "east-a" in _replicas(db_url), what="its row")
    execs.execute(
        "INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid,"
        " reason, cluster) VALUES (1, 'x', 1, 'sandboxes', 'pod-x', gen_random_uuid(), 'retired', 'east')"
    )
    text = cli("status", url=db_url).stdout
    assert text.startswith("NO LIVE REPLICA (cluster east): 1 open row(s)"), text
    assert "nothing sweeps it" in text.split("\n\n", 1)[0]
    [east] = [w for w in _status(db_url)["sweepers"] if w["cluster"] == "east"]
    assert east["unswept"] and east["live_replicas"] == 0
    # A replica of an older release (it keeps no row) claims there: it may be sweeping, unseen.
    execs.execute(
        "UPDATE pod_sweeper.outbox SET status = 'claimed', claimed_by = 'old-release-a', claim_epoch = 1,"
        " claimed_at = now(), next_attempt_at = now() + interval '1 minute' WHERE sandbox_id = 'x'"
    )
    text = cli("status", url=db_url).stdout
    first = text.split("\n\n", 1)[0]
    assert first.startswith("REPLICAS UNSEEN (cluster east)") and "old-release-a claimed or armed there" in first
    [east] = [w for w in _status(db_url)["sweepers"] if w["cluster"] == "east"]
    assert not east["unswept"] and east["unseen"] == ["old-release-a"]
