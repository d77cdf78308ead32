"""The gates that hold deletes back: the auth circuit, the per-namespace refusals, and the
blast-radius breaker's policy. Small, clock-injected and free of I/O, so each is unit-tested alone.

``AuthGate``: a 401 is the daemon's fault (its credentials), not the row's, and holds for every row.
The gate closes for a backoff that grows with each refusal in a row, claims nothing meanwhile, says
what is wrong, and opens again on the first answer Kubernetes gives.

``NamespaceGates``: a 403 is the daemon's fault for one namespace (its RBAC there, or an admission
policy), so it holds back that namespace's rows alone, for a backoff of its own that grows to
``backoff_max``; every other namespace goes on at full speed and the replica stays ready.

``OutageGate``: the API server cannot be reached, or answers 5xx to everything (its health check says
so too). That is nobody's fault a row could answer for, so every row waits uncharged while the gate is
closed, and nothing is sent but a probe of the server, after a backoff that grows to half a minute; the
first probe the server answers opens the gate again.

``breaker_budget`` and ``trip_reason``: how many rows a claim may take within the ceiling's minute of
deletes (counted across replicas from the attempt history, plus the claims held right now), and why the
breaker trips when that far backstop is spent while work is waiting. The rules that trip it first, on a
surge or one large host transaction, are in ``surge``.

**Threads.** Only the event loop changes a gate; the sender's pool threads read them (``Sender._may_send``
before each DELETE of a chunk). So each gate keeps what can change as one frozen snapshot and a change
replaces the snapshot whole (one reference assignment): a reader takes the reference once and sees the
gate before a change or after it, never half of one. Nothing here relies on a read of two attributes
agreeing; ``tests/unit/test_gates.py`` reads from a thread while the loop changes each gate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import MappingProxyType

from prometheus_client import Gauge

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.kube.answer import Answer, Said
from pod_sweeper.store.rows import BreakerWindow


@dataclass(frozen=True)
class Refusal:
    """A 401 or 403 as its gate took it: how long the row waits, what is wrong (for ``last_error``) and
    the status of the answer that closed the gate (for ``last_http_status``)."""

    delay: float
    error: str
    status: int | None = None


@dataclass(frozen=True)
class _Auth:
    failures: int = 0  # 401s (or credentials the hook could not get) in a row
    blocked_until: float = 0.0  # monotonic
    error: str | None = None  # what was refused and what is needed; None once answered again


class AuthGate:
    """The 401 circuit (and the credential hook's: an ``unsent`` answer): every row waits while it is
    closed. Owns ``pod_sweeper_kube_refusing``."""

    def __init__(
        self,
        backoff: Backoff,
        *,
        floor: float,
        clock: Callable[[], float] = time.monotonic,
        gauge: Gauge | None = None,
    ) -> None:
        self._backoff = backoff
        self._floor = floor  # never closed for less than this (the settings' backoff_base)
        self._clock = clock
        self._state = _Auth()  # replaced whole by the loop, read by the sender's threads (module docstring)
        if gauge is not None:
            gauge.set_function(lambda: 1.0 if self.refusing else 0.0)

    @property
    def error(self) -> str | None:
        return self._state.error

    def refused(self, answer: Answer) -> Refusal:
        """Kubernetes did not accept the credentials (a 401 ``answer``), or the client could not get any
        (``unsent``: its credential hook failed): close for a while."""
        failures = self._state.failures + 1
        delay = self._backoff.delay(failures, at_least=self._floor)
        if answer.said is Said.UNSENT:
            why = (
                "the daemon cannot get its credentials (check the kubeconfig's auth provider and its identity provider)"
            )
        else:
            why = "the API server does not accept the daemon's credentials (check the token or kubeconfig)"
        error = f"{answer}; {why}"
        self._state = _Auth(failures, self._clock() + delay, error)
        return Refusal(delay, error, answer.status)

    def answered(self) -> None:
        """Kubernetes answered a request: whatever was refused before works now."""
        self._state = replace(self._state, failures=0, error=None)

    @property
    def open(self) -> bool:
        """Whether requests may be sent now."""
        return self._clock() >= self._state.blocked_until

    def wait(self) -> float:
        """Seconds until the gate opens (0 when open)."""
        return max(0.0, self._state.blocked_until - self._clock())

    @property
    def refusing(self) -> str | None:
        """The reason to report not ready: closed, or refused and not answered since."""
        state = self._state
        closed = self._clock() < state.blocked_until
        return state.error if (closed or state.error is not None) else None


@dataclass(frozen=True)
class _Closing:
    failures: int  # 403s in a row in the namespace
    until: float  # monotonic
    error: str  # what was refused and what is needed
    status: int | None  # the refusal's HTTP status (a 403)


class NamespaceGates:
    """One closing per refused namespace: which namespaces answer 403, until when, and why. Owns
    ``pod_sweeper_namespace_refused{pod_namespace}``."""

    def __init__(
        self,
        backoff: Backoff,
        *,
        floor: float,
        clock: Callable[[], float] = time.monotonic,
        gauge: Gauge | None = None,
    ) -> None:
        self._backoff, self._floor, self._clock, self._gauge = backoff, floor, clock, gauge
        # namespace -> its closing; a read-only mapping the loop replaces whole (module docstring)
        self._closings: MappingProxyType[str, _Closing] = MappingProxyType({})

    def refused(self, namespace: str, answer: Answer) -> Refusal:
        """A 403 ``answer`` in ``namespace``: hold its rows back for a while."""
        before = self._closings.get(namespace)
        failures = (before.failures if before else 0) + 1
        delay = self._backoff.delay(failures, at_least=self._floor)
        error = f"{answer}; the daemon needs 'delete' (and 'get') on pods in namespace {namespace}"
        closing = _Closing(failures, self._clock() + delay, error, answer.status)
        self._closings = MappingProxyType({**self._closings, namespace: closing})
        if self._gauge is not None:
            self._gauge.labels(namespace).set(1)
        return Refusal(delay, error, answer.status)

    def answered(self, namespace: str) -> bool:
        """Kubernetes answered a request in ``namespace`` with something other than 403; True when it
        had been refused until now."""
        if namespace not in self._closings:
            return False
        self._closings = MappingProxyType({ns: c for ns, c in self._closings.items() if ns != namespace})
        if self._gauge is not None:
            self._gauge.labels(namespace).set(0)
        return True

    def wait(self, namespace: str) -> float:
        """Seconds until ``namespace``'s rows may be sent again (0: now)."""
        closing = self._closings.get(namespace)
        return max(0.0, closing.until - self._clock()) if closing else 0.0

    def refusal(self, namespace: str) -> Refusal | None:
        """Why ``namespace``'s rows wait, and for how much longer; None when they may go."""
        closing = self._closings.get(namespace)
        wait = max(0.0, closing.until - self._clock()) if closing else 0.0
        return Refusal(wait, closing.error, closing.status) if closing and wait else None

    def refusing(self) -> dict[str, str]:
        """The namespaces refused and not answered since, with why."""
        return {ns: closing.error for ns, closing in self._closings.items()}


@dataclass(frozen=True)
class _Outage:
    failures: int = 0  # probes failed in a row
    since: float | None = None  # when it closed (monotonic); None while open
    next_probe: float = 0.0
    reason: str | None = None  # why it is closed; None while open


class OutageGate:
    """Closed while the API server cannot be reached; opened only by a probe it answers."""

    def __init__(self, backoff: Backoff, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._backoff, self._clock = backoff, clock
        self._state = _Outage()  # replaced whole by the loop, read by the sender's threads (module docstring)

    @property
    def failures(self) -> int:
        return self._state.failures

    @property
    def since(self) -> float | None:
        return self._state.since

    @property
    def reason(self) -> str | None:
        return self._state.reason

    def close(self, reason: str) -> float:
        """A probe failed: stay closed (or close) until the next probe; returns the seconds until it."""
        before, now = self._state, self._clock()
        failures = before.failures + 1
        delay = self._backoff.delay(failures)
        self._state = _Outage(failures, now if before.since is None else before.since, now + delay, reason)
        return delay

    def reopen(self) -> float:
        """A probe was answered: open; returns how long it was closed."""
        since = self._state.since
        self._state = _Outage()
        return 0.0 if since is None else self._clock() - since

    @property
    def open(self) -> bool:
        return self._state.reason is None

    def wait(self) -> float:
        """Seconds until the next probe is due (0 while open)."""
        state = self._state
        return 0.0 if state.reason is None else max(0.0, state.next_probe - self._clock())


class BreakerGate:
    """The blast-radius breaker of this replica's cluster as it last read it from the database: the
    claimer tells it what it read (``observe``), the workers ask it before each DELETE, readiness
    reports it. Another cluster's breaker never closes it. Owns ``pod_sweeper_breaker_tripped``. Its
    state is one string, replaced whole (the module's "Threads")."""

    def __init__(self, gauge: Gauge | None = None) -> None:
        self.reason: str | None = None  # set while tripped
        if gauge is not None:
            gauge.set_function(lambda: 1.0 if self.reason is not None else 0.0)

    def observe(self, reason: str | None) -> None:
        """The breaker as the database has it now (tripped with ``reason``, or not: None)."""
        self.reason = reason

    @property
    def open(self) -> bool:
        return self.reason is None


class SchemaGate:
    """Whether this release may run on the schema the database has now, as the schema watch last read
    it (tasks/loops/schema_watch.py): a newer release's migration that declares this one too old, or a
    schema gone behind, closes it. Closed, the claimer claims nothing and readiness says why. Owns
    ``pod_sweeper_schema_incompatible``. ``reason`` is replaced whole; ``opened`` is the loop's alone."""

    def __init__(self, gauge: Gauge | None = None) -> None:
        self.reason: str | None = None
        self.opened = asyncio.Event()
        self.opened.set()
        if gauge is not None:
            gauge.set_function(lambda: 1.0 if self.reason is not None else 0.0)

    def observe(self, reason: str | None) -> None:
        self.reason = reason
        if reason is None:
            self.opened.set()
        else:
            self.opened.clear()

    @property
    def open(self) -> bool:
        return self.reason is None


def breaker_budget(limit: int, window: BreakerWindow, want: int) -> int:
    """Rows a claim may take: none while the breaker is tripped (by any rule), ``want`` with the ceiling
    off (``limit`` 0), else what is left of the minute's deletes after those done and those claimed now."""
    if window.tripped_reason is not None:
        return 0
    if not limit:
        return want
    return max(0, min(want, limit - window.total - window.claimed))


def trip_reason(limit: int, window: BreakerWindow, cluster: str) -> str:
    """Why a cluster's breaker trips: the minute's count, the busiest namespace, and what to do."""
    busiest = max(window.deletes, key=lambda ns: window.deletes[ns], default="-")
    in_flight = f" and {window.claimed} in flight" if window.claimed else ""
    return (
        f"cluster {cluster}: {window.total} deletes within a minute{in_flight} reached "
        f"POD_SWEEPER_MAX_DELETES_PER_MINUTE={limit} (most in namespace {busiest}: "
        f"{window.deletes.get(busiest, 0)}) with more rows waiting; check what retired them, then run "
        f"`pod-sweeper reset-breaker --cluster {cluster}`"
    )
