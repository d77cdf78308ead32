"""The breaker's surge and transaction rules (tasks/rules/surge.py), without I/O: steady churn at any
rate, and churn that grows over minutes, never trips the surge rule; a script's surge does, within the
first look. The transaction rule's count is the claim's (store/sweep/outbox.py); here, what it says. On
PostgreSQL with the daemon: tests/integration/test_surge.py."""

from __future__ import annotations

import random

from pod_sweeper.store.sweep.rates import Arrivals
from pod_sweeper.tasks.rules.surge import (
    SURGE_INTERVAL,
    SURGE_WINDOW,
    Baseline,
    SurgeRules,
    judge,
    transaction_reason,
)

SHIPPED = SurgeRules(factor=4.0, floor=200.0, transaction_rows=500)


def seen(rate: float) -> Arrivals:
    return Arrivals(round(rate * SURGE_WINDOW), SURGE_WINDOW, None)


def churn(rules: SurgeRules, baseline: Baseline, rates: list[float]) -> list[str]:
    """Each rate for one look, as the watch follows it: the reasons it would have tripped."""
    trips = []
    for rate in rates:
        reason = judge(rules, seen(rate), baseline.rate, "c")
        if reason is None:
            baseline.learn(rate, SURGE_INTERVAL)
        else:
            trips.append(reason)
    return trips


def test_steady_churn_of_100_a_second_for_ten_minutes_never_trips_from_a_cold_start() -> None:
    noise = random.Random(7)
    looks = int(600 / SURGE_INTERVAL)
    # Poisson-like noise on 100 a second, and the host's own bunching: 3x for a look now and then.
    rates = [100 * noise.uniform(0.7, 1.3) * (1.5 if noise.random() < 0.01 else 1.0) for _ in range(looks)]
    assert churn(SHIPPED, Baseline(0.0), rates) == []


def test_churn_that_grows_over_minutes_is_followed_not_tripped_on() -> None:
    # From 100 to 1,000 a second over an hour (platforms grow by the day, not by the second).
    looks = int(3600 / SURGE_INTERVAL)
    rates = [100 + 900 * i / looks for i in range(looks)]
    baseline = Baseline(100.0)
    assert churn(SHIPPED, baseline, rates) == []
    assert baseline.rate > 800


def test_a_script_of_500_a_second_trips_at_its_first_full_window_on_a_quiet_or_a_busy_cluster() -> None:
    for recent in (0.0, 100.0):
        assert judge(SHIPPED, seen(500), recent, "c") is not None
        assert judge(SHIPPED, seen(recent + 500), recent, "c") is not None
    # Within the window's first second it has arrived at 250/s: already above the floor.
    assert judge(SHIPPED, Arrivals(500, SURGE_WINDOW, None), 0.0, "c") is not None


def test_below_the_floor_nothing_trips_whatever_the_recent_rate() -> None:
    assert judge(SHIPPED, seen(199), 0.0, "c") is None
    assert judge(SHIPPED, seen(201), 0.0, "c") is not None


def test_above_the_floor_the_recent_rate_decides() -> None:
    assert judge(SHIPPED, seen(390), 100.0, "c") is None  # below 4x
    reason = judge(SHIPPED, seen(410), 100.0, "c")
    assert reason is not None
    assert reason.startswith("cluster c: 820 retires in 2 s (410/s) against a recent rate of 100.0/s")
    assert "POD_SWEEPER_BREAKER_SURGE_FACTOR=4" in reason and "reset-breaker --cluster c" in reason


def test_the_transaction_rule_names_the_size_the_setting_and_the_release() -> None:
    reason = transaction_reason(5_000, SHIPPED, "c")
    assert reason.startswith("cluster c: one host transaction retired at least 5000 executions")
    assert "POD_SWEEPER_BREAKER_TRANSACTION_ROWS=500" in reason and "release-transaction ID" in reason
    assert "reset-breaker" not in reason  # it holds the transaction, not the cluster


def test_each_rule_turns_off_with_zero() -> None:
    no_surge = SurgeRules(factor=0.0, floor=200.0, transaction_rows=500)
    assert judge(no_surge, seen(10_000), 0.0, "c") is None
    assert not no_surge.watched  # the watch has no rule left: it does not run
    assert SurgeRules(factor=4.0, floor=200.0, transaction_rows=0).watched


def test_the_baseline_forgets_over_ten_minutes() -> None:
    baseline = Baseline(100.0)
    for _ in range(int(600 / SURGE_INTERVAL)):
        baseline.learn(0.0, SURGE_INTERVAL)
    assert 30 < baseline.rate < 40  # about 1/e left after one horizon
