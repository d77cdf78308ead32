"""A clock a test moves by hand: what the claimer and the sender measure leases on, and the in-memory
store's ``now``, so a lease can run short or expire without a test waiting for it."""

from __future__ import annotations


class FakeClock:
    """Seconds, like ``time.monotonic``; it stands still until ``advance``."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._now += seconds
