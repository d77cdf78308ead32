"""Retry delays and a request rate limit: the two pieces of pacing the daemon shares.

``Backoff`` is exponential with full jitter (a uniformly random delay up to the capped exponential),
which spreads the retries of many rows and replicas instead of having them return in lockstep.
``TokenBucket`` is client-go's QPS/burst limiter: it lets ``burst`` requests through at once and then
``rate`` per second, protecting the API server from a sudden wave of retires.
"""

from __future__ import annotations

import asyncio
import random
import time


class Backoff:
    """``delay(n)`` for the n-th consecutive failure (n >= 1)."""

    def __init__(self, base: float, cap: float, *, rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = cap
        self._rng = rng or random.Random()

    def ceiling(self, attempt: int) -> float:
        return float(min(self.cap, self.base * 2 ** max(0, min(attempt - 1, 62))))

    def delay(self, attempt: int, *, at_least: float | None = None) -> float:
        """A jittered delay; never below ``at_least`` (a server's Retry-After), never above the cap
        unless the server asked for more."""
        jittered = self._rng.uniform(0, self.ceiling(attempt))
        if at_least is not None:
            return max(jittered, at_least)
        return jittered


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
