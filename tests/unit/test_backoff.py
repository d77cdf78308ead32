"""Backoff with full jitter, and the client-go style token bucket."""

from __future__ import annotations

import asyncio
import random
import time

from pod_sweeper.core.backoff import Backoff, TokenBucket


def test_ceiling_doubles_up_to_the_cap() -> None:
    backoff = Backoff(1.0, 30.0)
    assert [backoff.ceiling(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff.ceiling(10_000) == 30


def test_full_jitter_stays_within_the_ceiling_and_spreads() -> None:
    backoff = Backoff(1.0, 300.0, rng=random.Random(7))
    delays = [backoff.delay(5) for _ in range(2000)]
    assert all(0 <= d <= 16 for d in delays)
    assert min(delays) < 2 and max(delays) > 14  # spread over the whole range, not clustered


def test_retry_after_is_a_floor_even_above_the_cap() -> None:
    backoff = Backoff(0.1, 0.5, rng=random.Random(1))
    assert all(backoff.delay(3, at_least=7.0) == 7.0 for _ in range(100))


def test_token_bucket_allows_the_burst_then_the_rate() -> None:
    async def take(n: int) -> float:
        bucket = TokenBucket(rate=20, burst=5)
        started = time.monotonic()
        for _ in range(n):
            await bucket.acquire()
        return time.monotonic() - started

    assert asyncio.run(take(5)) < 0.1  # the burst goes at once
    assert asyncio.run(take(25)) >= 0.95  # 20 more at 20 per second


def test_zero_rate_is_unlimited() -> None:
    async def take() -> None:
        bucket = TokenBucket(rate=0, burst=1)
        for _ in range(1000):
            await bucket.acquire()

    asyncio.run(asyncio.wait_for(take(), 1))
