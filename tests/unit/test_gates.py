"""The two gates alone, with a clock of their own: the 401/403 circuit and the breaker's policy."""

from __future__ import annotations

import random

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.store.outbox import BreakerWindow
from pod_sweeper.tasks.gates import AuthGate, breaker_budget, trip_reason


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_auth_gate_closes_longer_with_each_refusal_and_opens_on_an_answer() -> None:
    clock = Clock()
    gate = AuthGate(Backoff(1.0, 60.0, rng=random.Random(1)), floor=1.0, clock=clock)
    assert gate.open and gate.refusing is None
    first = gate.refused(403, "403 Forbidden", "sandboxes")
    assert first >= 1.0 and not gate.open and gate.wait() == first
    assert gate.refusing is not None and "needs 'delete' (and 'get') on pods in namespace sandboxes" in gate.refusing
    clock.now += first
    assert gate.open and gate.wait() == 0
    assert gate.refusing is not None  # open again, but still refused until Kubernetes answers
    gate.refused(401, "401 Unauthorized", "sandboxes")
    assert gate.failures == 2 and "credentials" in (gate.error or "")
    gate.answered()
    clock.now = gate.blocked_until
    assert gate.open and gate.refusing is None and gate.failures == 0


def test_the_breaker_budget() -> None:
    def window(deletes: int, claimed: int = 0, tripped: str | None = None) -> BreakerWindow:
        return BreakerWindow(tripped, {"a": deletes}, claimed)

    assert breaker_budget(0, window(10_000), want=100) == 100  # off
    assert breaker_budget(1000, window(0), want=100) == 100
    assert breaker_budget(1000, window(950), want=100) == 50
    assert breaker_budget(1000, window(950, claimed=40), want=100) == 10  # rows held may still go
    assert breaker_budget(1000, window(1000), want=100) == 0
    assert breaker_budget(1000, window(1200), want=100) == 0
    assert breaker_budget(1000, window(0, tripped="earlier"), want=100) == 0


def test_the_trip_reason_names_the_count_the_busiest_namespace_and_the_way_out() -> None:
    reason = trip_reason(1000, BreakerWindow(None, {"a": 400, "b": 600}, 0))
    assert reason.startswith("1000 deletes within a minute reached POD_SWEEPER_MAX_DELETES_PER_MINUTE=1000")
    assert "(most in namespace b: 600)" in reason and "`pod-sweeper resume`" in reason
