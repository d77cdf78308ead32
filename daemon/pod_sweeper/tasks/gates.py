"""The two gates that stop every delete of a replica, whatever the row: the auth circuit and the
blast-radius breaker's policy. Small, clock-injected and free of I/O, so each is unit-tested alone.

``AuthGate``: a 401 or 403 is the daemon's fault (its credentials or its RBAC), not the row's. The gate
closes for a backoff that grows with each refusal in a row, claims nothing meanwhile, says which
permission is missing, and opens again on the first answer Kubernetes gives.

``breaker_budget`` and ``trip_reason``: how many rows a claim may take within the minute's deletes
(counted across replicas from the attempt history, plus the claims held right now), and why the
breaker trips when the budget is spent while work is waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.store.outbox import BreakerWindow


class AuthGate:
    def __init__(self, backoff: Backoff, *, floor: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._backoff = backoff
        self._floor = floor  # never closed for less than this (the settings' backoff_base)
        self._clock = clock
        self.failures = 0
        self.blocked_until = 0.0
        self.error: str | None = None  # what was refused and what is needed; None once answered again

    def refused(self, status: int | None, message: str, namespace: str) -> float:
        """Kubernetes refused a request: close for a while; returns the seconds closed."""
        self.failures += 1
        delay = self._backoff.delay(self.failures, at_least=self._floor)
        self.blocked_until = self._clock() + delay
        need = (
            f"the service account needs 'delete' (and 'get') on pods in namespace {namespace}"
            if status == 403
            else "the API server does not accept the daemon's credentials (check the token or kubeconfig)"
        )
        self.error = f"{message}; {need}"
        return delay

    def answered(self) -> None:
        """Kubernetes answered a request: whatever was refused before works now."""
        self.failures = 0
        self.error = None

    @property
    def open(self) -> bool:
        """Whether requests may be sent now."""
        return self._clock() >= self.blocked_until

    def wait(self) -> float:
        """Seconds until the gate opens (0 when open)."""
        return max(0.0, self.blocked_until - self._clock())

    @property
    def refusing(self) -> str | None:
        """The reason to report not ready: closed, or refused and not answered since."""
        return self.error if (not self.open or self.error is not None) else None


class BreakerGate:
    """The blast-radius breaker as this replica last read it from the database: the claimer sets it,
    the workers ask it before each DELETE, readiness reports it."""

    def __init__(self) -> None:
        self.reason: str | None = None  # set while tripped

    @property
    def open(self) -> bool:
        return self.reason is None


def breaker_budget(limit: int, window: BreakerWindow, want: int) -> int:
    """Rows a claim may take: ``want`` with the breaker off (``limit`` 0), none while it is tripped,
    else what is left of the minute's deletes after those done and those claimed right now."""
    if not limit:
        return want
    if window.tripped_reason is not None:
        return 0
    return max(0, min(want, limit - window.total - window.claimed))


def trip_reason(limit: int, window: BreakerWindow) -> str:
    """Why the breaker trips: the minute's count, the busiest namespace, and what to do."""
    busiest = max(window.deletes, key=lambda ns: window.deletes[ns], default="-")
    return (
        f"{window.total} deletes within a minute reached POD_SWEEPER_MAX_DELETES_PER_MINUTE={limit} "
        f"(most in namespace {busiest}: {window.deletes.get(busiest, 0)}) with more rows waiting; "
        "check what retired them, then run `pod-sweeper resume`"
    )
