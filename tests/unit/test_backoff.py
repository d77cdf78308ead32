"""Backoff with equal jitter, what a number of attempts spans, and the client-go style token bucket."""

from __future__ import annotations

import asyncio
import random
import time

from pod_sweeper.core.backoff import Backoff, TokenBucket, describe_duration, retry_span


def test_ceiling_doubles_up_to_the_cap() -> None:
    backoff = Backoff(1.0, 30.0)
    assert [backoff.ceiling(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert backoff.ceiling(10_000) == 30


def test_equal_jitter_stays_between_half_and_all_of_the_ceiling_and_spreads() -> None:
    backoff = Backoff(1.0, 300.0, rng=random.Random(7))
    delays = [backoff.delay(5) for _ in range(2000)]
    assert all(8 <= d <= 16 for d in delays)
    assert min(delays) < 9 and max(delays) > 15  # spread over the whole half, not clustered


def test_the_span_of_the_retries_is_half_to_all_of_the_ceilings() -> None:
    # 4 attempts: 3 delays with ceilings 1, 2, 4 s.
    assert retry_span(1.0, 300.0, 4) == (span := retry_span(1.0, 300.0, 4))
    assert (span.retries, span.shortest, span.longest) == (3, 3.5, 7.0)
    assert retry_span(1.0, 300.0, 1).longest == 0  # one attempt: no retry at all
    capped = retry_span(1.0, 4.0, 6)  # 1, 2, 4, 4, 4
    assert (capped.shortest, capped.longest) == (7.5, 15.0)


def test_drawn_delays_stay_within_the_span() -> None:
    rng = random.Random(3)
    span = retry_span(0.5, 20.0, 12)
    for _ in range(200):
        backoff = Backoff(0.5, 20.0, rng=rng)
        total = sum(backoff.delay(n) for n in range(1, 12))
        assert span.shortest <= total <= span.longest


def test_durations_read_as_people_say_them() -> None:
    assert [describe_duration(s) for s in (45, 95, 120, 3600, 3855.5, 7711)] == [
        "45 s",
        "1 min 35 s",
        "2 min",
        "1 h",
        "1 h 4 min",
        "2 h 8 min",
    ]


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
