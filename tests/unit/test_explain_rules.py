"""`pod-sweeper explain`'s rules, without a database: what the operator named, and what happens next
to a row in each state of the outbox's state machine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pod_sweeper.cli.explain_text import next_step, no_row_story
from pod_sweeper.store.reads.explain import Target

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)


def row(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": 7,
        "status": "pending",
        "outcome": None,
        "attempts": 0,
        "claimed_by": None,
        "claimed_at": None,
        "next_attempt_at": NOW,
        "lease_expires_at": None,
        "last_error": None,
        "confirm_after": None,
        "confirmed_at": None,
        "stuck_at": None,
        "now": NOW,
    }
    return {**base, **overrides}


def test_target_parsing() -> None:
    uid = "5f0c2d0e-8a39-4bb5-9f3a-0c2b8a7d9e11"
    assert Target.parse(uid) == Target(uid=uid)
    assert Target.parse("sandboxes/pod-1") == Target(namespace="sandboxes", name="pod-1")
    assert Target.parse("s-42") == Target(name="s-42", sandbox="s-42")


@pytest.mark.parametrize(
    ("overrides", "wait", "expected"),
    [
        ({}, "due", "claimable now: the next claim takes it, attempt 1"),
        ({}, None, "claimable now: the next claim takes it, attempt 1"),  # closed before its reason was read
        ({}, "breaker", "waits [breaker]: the blast-radius breaker of its cluster is tripped (cluster default: "),
        ({}, "breaker", "`pod-sweeper reset-breaker --cluster default` after a look"),
        ({"attempts": 2, "next_attempt_at": NOW + timedelta(seconds=30)}, "backoff", "waits [backoff]: backoff"),
        ({"attempts": 2, "next_attempt_at": NOW + timedelta(seconds=30)}, None, "(30 s from now), then attempt 3"),
        ({}, "replication_guard", "waits [replication_guard]: the replication guard"),
        ({}, "replication_guard", "point POD_SWEEPER_REPLICATION_GUARD at the new standby"),
        ({}, "kube_unreachable", "waits [kube_unreachable]: the cluster's API server cannot be reached"),
        ({"last_error": "401 Unauthorized"}, "kube_unauthorized", "(tried again at 2026-12-03 12:00:00 (0 s ago)"),
        ({"last_error": "403"}, "namespace_refused", "grant the daemon 'delete' and 'get' on pods there"),
        ({"next_attempt_at": NOW - timedelta(minutes=5)}, "unswept", "claimable since 5 min ago, attempt 1"),
        (
            {
                "status": "claimed",
                "claimed_by": "r1",
                "claimed_at": NOW - timedelta(seconds=5),
                "lease_expires_at": NOW + timedelta(seconds=55),
            },
            None,
            "waits [claimed]: a replica has claimed it: its DELETE is in flight or its result is being recorded "
            "(claimed by r1 5 s ago; if that replica died, another takes it when the lease ends (55 s from now))",
        ),
        ({"status": "dead", "attempts": 10, "last_error": "HTTP 403"}, None, "`pod-sweeper retry 7`"),
        ({"status": "done", "outcome": "deleted"}, None, "done: deleted"),
        (
            {"status": "done", "outcome": "deleted", "confirm_after": NOW + timedelta(seconds=40)},
            None,
            "deleted and terminating: looked at again at",
        ),
        (
            {"status": "done", "outcome": "deleted", "confirmed_at": NOW - timedelta(minutes=3)},
            None,
            "seen gone 3 min ago",
        ),
        ({"status": "done", "outcome": "deleted", "stuck_at": NOW}, None, "stuck terminating"),
        ({"status": "done", "outcome": "absent"}, None, "already gone"),
        ({"status": "done", "outcome": "replaced"}, None, "another pod (another UID), which was left alone"),
        ({"status": "done", "outcome": "skipped_active"}, None, "active again when claimed"),
        ({"status": "done", "outcome": "would_delete"}, None, "the next real run reopens it"),
        ({"status": "done", "outcome": "discarded"}, None, "discarded by an operator, no request sent"),
    ],
)
def test_what_happens_next_to_a_row(overrides: dict[str, Any], wait: str | None, expected: str) -> None:
    assert expected in next_step(row(**overrides, wait=wait))


def test_what_happens_to_a_pod_without_a_row() -> None:
    active = {"active": True}
    retired = {"active": False}
    suspect = {"why": "retired", "first_seen_at": NOW}
    assert "active: nothing happens until a writer retires it" in no_row_story([active, retired], [])
    assert "active" in no_row_story([{"active": None}], [])  # NULL counts as active, as the re-check says
    assert "reconciliation suspect (retired)" in no_row_story([retired], [suspect])
    assert "`pod-sweeper backfill`" in no_row_story([retired], [])
    assert "knows nothing of it" in no_row_story([], [])


def test_a_hold_or_a_pause_says_what_keeps_a_pending_row() -> None:
    pending = row(
        status="pending", next_attempt_at=NOW, cluster="default", pod_namespace="ns", pod_name="p", pod_uid="u1"
    )
    paused, held = {**pending, "wait": "paused"}, {**pending, "wait": "held"}
    until = NOW + timedelta(hours=1)
    hold = {
        "kind": "hold",
        "cluster": "default",
        "pod_namespace": "ns",
        "pod_name": "p",
        "pod_uid": None,
        "actor": "ana",
        "reason": "forensics",
        "until": until,
    }
    pause = {
        "kind": "pause",
        "cluster": "default",
        "pod_namespace": "",
        "pod_name": None,
        "pod_uid": None,
        "actor": "bo",
        "reason": "incident",
        "until": until,
    }
    # (Which controls keep a row is pod_sweeper.keeping's to say: tests/integration/test_controls.py.)
    said = next_step(paused, kept=[pause])
    assert said.startswith("waits [paused]: an on-call's pause of its cluster or namespace (paused (the whole cluster")
    assert "by bo until" in said and "`pod-sweeper unpause --cluster default`)" in said
    assert "`pod-sweeper release ns/p --cluster default`" in next_step(held, kept=[hold])
    both = next_step(held, kept=[hold, pause])
    assert "held by ana" in both and "; and paused (the whole cluster" in both
