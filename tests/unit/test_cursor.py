"""The claim cursor (store/sweep/cursor.py), without I/O: claims read from the floor, one claim every
DISCOVERY_SECONDS reads from the start and is repeated while it fills its batch, and the floor never
passes a row the next-due read saw nor comes within MARGIN of the database's clock. And the metrics
refresher's rule for the reads of every open row while the xmin horizon is pinned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from harness.clock import FakeClock
from pod_sweeper.store.sweep.cursor import DISCOVERY_SECONDS, MARGIN, START, ClaimCursor

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def test_the_first_claim_discovers_and_the_next_due_read_sets_the_floor() -> None:
    cursor = ClaimCursor(FakeClock())
    assert cursor.claim_from() == START
    cursor.claimed(3, 100)
    assert cursor.due_from() == START
    cursor.looked(None, NOW)  # nothing open: the floor stays the margin below the database's clock
    assert cursor.floor == NOW - MARGIN
    assert cursor.claim_from() == NOW - MARGIN


def test_the_floor_stops_at_the_lowest_row_due_and_only_rises_between_discoveries() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(clock)
    cursor.claim_from()
    cursor.looked(NOW - timedelta(seconds=30), NOW)  # a row in backoff since 30 s ago
    assert cursor.floor == NOW - timedelta(seconds=30)
    clock.advance(1)
    assert cursor.claim_from() == NOW - timedelta(seconds=30)
    assert cursor.due_from() == NOW - timedelta(seconds=30)
    cursor.looked(None, NOW + timedelta(seconds=1))
    assert cursor.floor == NOW + timedelta(seconds=1) - MARGIN
    cursor.claim_from()
    cursor.looked(None, NOW - timedelta(seconds=60))  # a read that cannot lower it (the clock went back)
    assert cursor.floor == NOW + timedelta(seconds=1) - MARGIN


def test_every_discovery_interval_one_claim_reads_from_the_start_and_the_next_due_read_from_the_floor() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(clock)
    cursor.claim_from()
    assert cursor.due_from() == START  # no floor known yet
    cursor.looked(None, NOW)
    clock.advance(DISCOVERY_SECONDS - 0.1)
    assert cursor.claim_from() == NOW - MARGIN
    clock.advance(0.1)
    assert cursor.claim_from() == START  # a long host transaction's row below the floor is claimed here
    assert cursor.due_from() == NOW - MARGIN  # and what the discovery left below is not due: not read
    cursor.looked(None, NOW + timedelta(seconds=10))
    assert cursor.floor == NOW + timedelta(seconds=10) - MARGIN


def test_a_discovery_that_fills_its_batch_is_followed_by_another() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(clock)
    cursor.claim_from()
    cursor.claimed(100, 100)
    assert cursor.claim_from() == START  # full: rows may be left below any floor
    cursor.claimed(40, 100)
    cursor.looked(None, NOW)
    assert cursor.claim_from() == NOW - MARGIN
    cursor.claimed(100, 100)  # a full claim from the floor reads on from the floor
    assert cursor.claim_from() == NOW - MARGIN


def test_the_gauges_of_every_open_row_are_read_every_refresh_until_a_hold_has_lasted() -> None:
    from pod_sweeper.tasks.loops.refresher import PINNED_AFTER_SECONDS, PINNED_REFRESH_SECONDS, open_rows_due

    assert open_rows_due(0.0, None) and open_rows_due(0.0, 0.1)  # not held: every refresh
    assert open_rows_due(PINNED_AFTER_SECONDS - 1, 0.1)
    assert open_rows_due(PINNED_AFTER_SECONDS, None)  # never read yet: read now
    assert not open_rows_due(PINNED_AFTER_SECONDS, PINNED_REFRESH_SECONDS - 1)
    assert open_rows_due(PINNED_AFTER_SECONDS, PINNED_REFRESH_SECONDS)


def test_the_claimer_is_told_when_the_next_discovery_is_due() -> None:
    clock = FakeClock()
    cursor = ClaimCursor(clock)
    assert cursor.discovery_in() == 0.05  # no floor yet: the next claim discovers (a sleep, not a spin)
    cursor.claim_from()
    cursor.looked(None, NOW)
    assert cursor.discovery_in() == DISCOVERY_SECONDS
    clock.advance(DISCOVERY_SECONDS - 1)
    assert cursor.discovery_in() == 1.0
    clock.advance(5)
    assert cursor.discovery_in() == 0.05
