"""Retry delays and a request rate limit: the two pieces of pacing the daemon shares.

``Backoff`` is exponential with equal jitter: the n-th delay is drawn uniformly between half and all of
``min(cap, base * 2**(n-1))``. The random half spreads the retries of many rows and replicas instead
of having them return in lockstep; the fixed half guarantees a floor, so what ``max_attempts`` retries
span is a fact with a lower bound (``retry_span``) rather than a hope (full jitter can draw zero every
time). ``TokenBucket`` is client-go's QPS/burst limiter: it lets ``burst`` requests through at once and
then ``rate`` per second, protecting the API server from a sudden wave of retires.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

# The cap of the delays between reconnects and probes (a database, the LISTEN connection, an API server
# that cannot be reached): what comes back is noticed within half a minute, whatever backoff_max says.
RECONNECT_MAX_SECONDS = 30.0


class Backoff:
    """``delay(n)`` for the n-th consecutive failure (n >= 1)."""

    def __init__(self, base: float, cap: float, *, rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = cap
        self._rng = rng or random.Random()

    @classmethod
    def for_reconnects(cls, base: float, cap: float, *, rng: random.Random | None = None) -> Backoff:
        """The backoff between reconnects and probes: the settings' own, capped at
        ``RECONNECT_MAX_SECONDS`` so that what comes back is noticed soon."""
        return cls(base, min(cap, RECONNECT_MAX_SECONDS), rng=rng)

    def ceiling(self, attempt: int) -> float:
        """The longest delay after the ``attempt``-th failure; the shortest is half of it."""
        return float(min(self.cap, self.base * 2 ** max(0, min(attempt - 1, 62))))

    def delay(self, attempt: int, *, at_least: float | None = None) -> float:
        """A jittered delay between half and all of the ceiling; never below ``at_least`` (a server's
        Retry-After), never above the cap unless the server asked for more."""
        ceiling = self.ceiling(attempt)
        jittered = self._rng.uniform(ceiling / 2, ceiling)
        if at_least is not None:
            return max(jittered, at_least)
        return jittered


@dataclass(frozen=True)
class Span:
    """How long a row's retries last before it goes dead: between ``shortest`` and ``longest`` seconds
    from its first failure to its last attempt (the delays only; the requests themselves add a little)."""

    retries: int
    shortest: float
    longest: float


def retry_span(base: float, cap: float, max_attempts: int) -> Span:
    """What ``max_attempts`` attempts with this backoff span: ``max_attempts - 1`` delays, each at least
    half its ceiling. The settings' descriptions and docs/operations.md quote it, and a unit test holds
    them to it."""
    backoff = Backoff(base, cap)
    ceilings = [backoff.ceiling(n) for n in range(1, max_attempts)]
    return Span(len(ceilings), sum(ceilings) / 2, float(sum(ceilings)))


def describe_duration(seconds: float) -> str:
    """``3855`` -> ``"1 h 4 min"``, ``95`` -> ``"1 min 35 s"``: a span for people."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


class TokenBucket:
    """``await bucket.acquire()`` before each request; ``rate`` 0 means unlimited."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._tokens = float(burst)
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        if self.rate <= 0:
            return
        # One waiter at a time computes its wait, so tokens are handed out in arrival order.
        async with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            if self._tokens < 1:
                wait = (1 - self._tokens) / self.rate
                await asyncio.sleep(wait)
                self._stamp = time.monotonic()
                self._tokens = 0.0
            else:
                self._tokens -= 1
