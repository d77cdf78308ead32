"""What ``explain`` adds to an open row's next step from the replicas that decide its fate (their own
rows in pod_sweeper.replicas, never the reader's settings), as a pure function: no live replica, dry
run in the row's namespace, and live replicas that disagree, replica by replica."""

from __future__ import annotations

from typing import Any

import pytest

from pod_sweeper.cli.explain_text import replica_notes

pytestmark = pytest.mark.unit


def replica(name: str, *, state: str = "live", guard: str = "off", dry: str = "off", **row: Any) -> dict[str, Any]:
    return {
        "replica": name,
        "host": f"host-{name}",
        "release": "0.1.0",
        "cluster": "east",
        "state": state,
        "seen_seconds_ago": 3.0,
        "dry_run": dry == "every namespace",
        "dry_run_namespaces": [] if dry in ("off", "every namespace") else dry.split(", "),
        "settings": {"replication guard": guard, "dry run": dry, "namespaces": "every one"},
        **row,
    }


ROW = {"status": "pending", "cluster": "east", "pod_namespace": "shadow"}


def test_a_row_of_a_cluster_with_no_live_replica_says_so_and_names_the_last_known() -> None:
    [note] = replica_notes(ROW, [replica("a", state="stopped")])
    assert note.startswith(
        "no live replica of cluster east is known (pod_sweeper.replicas); the last known: a (stopped"
    )
    [note] = replica_notes(ROW, [])
    assert "no live replica of cluster east" in note and "last known" not in note
    assert replica_notes({**ROW, "status": "done"}, []) == []  # a done row waits for nothing


def test_dry_run_is_said_only_when_every_live_replica_runs_it_in_the_rows_namespace() -> None:
    notes = replica_notes(ROW, [replica("a", dry="shadow"), replica("b", dry="every namespace")])
    assert notes[0].startswith("dry run: every live replica of cluster east runs in dry run in namespace shadow (a, b)")
    assert notes[1].endswith("disagree on dry run (a rolling change?):")  # the same here, not in scope
    notes = replica_notes(ROW, [replica("a", dry="shadow"), replica("b")])
    assert not any(n.startswith("dry run") for n in notes)
    assert notes[0] == "the live replicas of cluster east disagree on dry run (a rolling change?):"


def test_replicas_that_disagree_on_the_guard_are_listed_one_by_one() -> None:
    notes = replica_notes(ROW, [replica("a", guard="s1"), replica("b", guard="s2"), replica("c", state="stale")])
    assert notes == [
        "the live replicas of cluster east disagree on replication guard (a rolling change?):",
        "  a (host-a, 0.1.0): replication guard s1",
        "  b (host-b, 0.1.0): replication guard s2",
    ]
    assert replica_notes(ROW, [replica("a", guard="s1"), replica("b", guard="s1")]) == []  # they agree
