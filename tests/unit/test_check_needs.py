"""Which permissions ``pod-sweeper check`` asks the API server about: a pure function of the settings,
one line per permission a feature that is on needs (the real server's answers: tests/realkube)."""

from __future__ import annotations

from typing import Any

from pod_sweeper.cli.check import needs
from pod_sweeper.core.settings import Settings


def asked(namespaces: list[str], **settings: Any) -> list[str]:
    return [p.name for p in needs(Settings(database_url="host=x", **settings), namespaces)]


def test_the_defaults_need_get_delete_and_events_in_each_namespace() -> None:
    assert asked(["a", "b"]) == [
        "get pods in a",
        "delete pods in a",
        "create events in a",
        "get pods in b",
        "delete pods in b",
        "create events in b",
    ]


def test_events_off_or_a_dry_run_need_no_events() -> None:
    assert asked(["a"], events=False) == ["get pods in a", "delete pods in a"]
    assert asked(["a"], dry_run=True) == ["get pods in a", "delete pods in a"]  # a dry run records none


def test_reconciliation_needs_list_where_it_runs_and_forcing_needs_nodes() -> None:
    reconcile = {
        "reconcile_sandbox_label": "sandbox",
        "reconcile_generation_label": "generation",
        "reconcile_namespace": "runs",
    }
    assert asked(["a"], events=False, **reconcile) == ["get pods in a", "delete pods in a", "list pods in runs"]
    assert asked([], events=False, force_stuck=True) == ["get nodes (cluster-wide)"]
    assert asked([], force_stuck=True, dry_run=True) == []  # a dry run forces nothing
