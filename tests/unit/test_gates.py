"""The gates alone, with a clock of their own: the 401 circuit, the per-namespace 403 gates, the outage
gate and the breaker's policy."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Gauge

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.kube.answer import Answer
from pod_sweeper.store.rows import BreakerWindow
from pod_sweeper.tasks.rules.gates import AuthGate, BreakerGate, NamespaceGates, OutageGate, breaker_budget, trip_reason


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_auth_gate_closes_longer_with_each_refusal_and_opens_on_an_answer() -> None:
    clock = Clock()
    gauge = Gauge("refusing", "test", registry=CollectorRegistry())
    gate = AuthGate(Backoff(1.0, 60.0, rng=random.Random(1)), floor=1.0, clock=clock, gauge=gauge)
    assert gate.open and gate.refusing is None and gauge.collect()[0].samples[0].value == 0
    first = gate.refused(Answer.of(401, "Unauthorized", "401 Unauthorized")).delay
    assert first >= 1.0 and not gate.open and gate.wait() == first
    assert gate.refusing is not None and "does not accept the daemon's credentials" in gate.refusing
    assert gauge.collect()[0].samples[0].value == 1  # the gate owns its gauge
    clock.now += first
    assert gate.open and gate.wait() == 0
    assert gate.refusing is not None  # open again, but still refused until Kubernetes answers
    gate.refused(Answer.of(401, "Unauthorized", "401 Unauthorized"))  # the second in a row: up to 2 s
    third = gate.refused(Answer.of(401, "Unauthorized", "401 Unauthorized")).delay
    assert third >= 2.0 > first and "credentials" in (gate.error or "")  # the third: between 2 and 4 s
    gate.answered()
    clock.now += gate.wait()
    assert gate.open and gate.refusing is None
    after_an_answer = gate.refused(Answer.of(401, "Unauthorized", "401 Unauthorized")).delay
    assert after_an_answer <= first  # the count of refusals in a row started over


def test_the_breaker_budget() -> None:
    def window(deletes: int, claimed: int = 0, tripped: str | None = None) -> BreakerWindow:
        return BreakerWindow(tripped, {"a": deletes}, claimed)

    assert breaker_budget(0, window(10_000), want=100) == 100  # the ceiling off
    assert breaker_budget(0, window(0, tripped="a surge"), want=100) == 0  # tripped by another rule
    assert breaker_budget(1000, window(0), want=100) == 100
    assert breaker_budget(1000, window(950), want=100) == 50
    assert breaker_budget(1000, window(950, claimed=40), want=100) == 10  # rows held may still go
    assert breaker_budget(1000, window(1000), want=100) == 0
    assert breaker_budget(1000, window(1200), want=100) == 0
    assert breaker_budget(1000, window(0, tripped="earlier"), want=100) == 0


def test_the_trip_reason_names_the_count_the_busiest_namespace_and_the_way_out() -> None:
    reason = trip_reason(1000, BreakerWindow(None, {"a": 400, "b": 600}, 0), "east")
    assert reason.startswith("cluster east: 1000 deletes within a minute reached POD_SWEEPER_MAX_DELETES_PER_MINUTE")
    assert "(most in namespace b: 600)" in reason and "`pod-sweeper reset-breaker --cluster east`" in reason


def test_the_outage_gate_stays_closed_until_a_probe_is_answered_probing_less_often_each_time() -> None:
    clock = Clock()
    gate = OutageGate(Backoff(1.0, 30.0, rng=random.Random(1)), clock=clock)
    assert gate.open and gate.wait() == 0 and gate.reason is None
    delays = []
    for _ in range(8):
        delays.append(gate.close("connection refused"))
        assert not gate.open and gate.wait() == pytest.approx(delays[-1])
        clock.now += delays[-1]
        assert not gate.open and gate.wait() == 0  # due for a probe, but closed until one is answered
    assert delays == sorted(delays[:6]) + delays[6:] and max(delays) <= 30.0 and max(delays) > 15.0
    assert gate.since == 100.0 and gate.reason == "connection refused"
    assert gate.reopen() == pytest.approx(sum(delays))  # how long it was closed
    assert gate.open and gate.failures == 0 and gate.since is None
    assert gate.close("timed out") <= 1.0  # the backoff starts over


def test_a_refused_namespace_waits_alone_longer_each_time_up_to_the_maximum() -> None:
    clock = Clock()
    gauge = Gauge("refused", "test", ["pod_namespace"], registry=CollectorRegistry())
    gates = NamespaceGates(Backoff(1.0, 8.0, rng=random.Random(1)), floor=1.0, clock=clock, gauge=gauge)
    assert gates.wait("a") == 0 and gates.refusing() == {}
    delays = []
    for _ in range(8):
        refusal = gates.refused("a", Answer.of(403, "Forbidden", "403 Forbidden"))
        delays.append(refusal.delay)
        assert gates.wait("a") == pytest.approx(refusal.delay) and gates.wait("b") == 0  # the others go on
        held = gates.refusal("a")
        assert held is not None and held.error == refusal.error and held.delay == pytest.approx(refusal.delay)
        assert held.status == refusal.status == 403  # a held row's last_http_status is the refusal's own
        assert gates.refusal("b") is None
        assert gauge.labels("a")._value.get() == 1
        clock.now += delays[-1]
    assert all(1.0 <= d <= 8.0 for d in delays) and max(delays) > 4.0  # grows, capped at backoff_max
    assert "needs 'delete' (and 'get') on pods in namespace a" in gates.refusing()["a"]
    assert gates.wait("a") == 0 and "a" in gates.refusing()  # open again, still refused until answered
    assert gates.answered("a") and not gates.answered("a")  # True: it had been refused until now
    assert gates.refusing() == {} and gates.wait("a") == 0 and gauge.labels("a")._value.get() == 0
    assert gates.refused("a", Answer.of(403, "Forbidden", "403")).delay <= 2.0  # the backoff starts over


def test_the_breaker_gate_is_what_the_claimer_last_read_and_owns_its_gauge() -> None:
    gauge = Gauge("tripped", "test", registry=CollectorRegistry())
    gate = BreakerGate(gauge)
    assert gate.open and gauge.collect()[0].samples[0].value == 0
    gate.observe("cluster east: 1000 deletes within a minute")
    assert not gate.open and gate.reason and gauge.collect()[0].samples[0].value == 1
    gate.observe(None)  # resumed
    assert gate.open and gauge.collect()[0].samples[0].value == 0


def test_a_thread_reading_the_gates_never_sees_half_of_a_change() -> None:
    """The sender's pool threads and the HTTP thread read the gates while the event loop changes them
    (gates.py, "Threads"). Here the loop's part is played by this thread, closing and opening each gate
    over and over, while a reader thread asks what the sender and readiness ask, the interpreter
    switching threads as often as it can: a namespace's refusal always comes with its error (two
    dictionaries written one after the other let a reader see the wait without it), a 401's reason is
    always the credentials', and the outage's wait is never beyond its backoff."""
    import sys
    import threading

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    backoff = Backoff(1.0, 60.0, rng=random.Random(1))
    auth, namespaces, outage = AuthGate(backoff, floor=1.0), NamespaceGates(backoff, floor=1.0), OutageGate(backoff)
    done = threading.Event()
    seen: list[str] = []
    reads = 0

    def read() -> None:
        nonlocal reads
        while not done.is_set():
            reads += 1
            refusal = namespaces.refusal("ns")
            if refusal is not None and "namespace ns" not in refusal.error:
                seen.append(f"a refusal without its error: {refusal}")
            if (refusing := auth.refusing) is not None and "credentials" not in refusing:
                seen.append(f"a 401 without its reason: {refusing!r}")
            if not 0.0 <= outage.wait() <= 60.0:
                seen.append(f"an outage wait out of its bounds: {outage.wait()}")

    reader = threading.Thread(target=read)
    reader.start()
    unauthorized, forbidden = Answer.of(401, "Unauthorized", "401 Unauthorized"), Answer.of(403, "Forbidden", "403")
    try:
        for _ in range(20_000):
            auth.refused(unauthorized)
            namespaces.refused("ns", forbidden)
            outage.close("connection refused")
            auth.answered()
            namespaces.answered("ns")
            outage.reopen()
    finally:
        done.set()
        reader.join()
        sys.setswitchinterval(previous)
    assert reads > 1000 and seen == [], seen[:3]
