"""The background loops' one shape: an expected failure is one log line and the loop goes on; anything
else ends the task."""

from __future__ import annotations

import asyncio
import contextlib
import io

import pytest

from pod_sweeper.core import periodic
from pod_sweeper.core.logs import setup_logging


def test_expected_failures_are_logged_in_one_line_and_the_loop_goes_on() -> None:
    out = io.StringIO()
    setup_logging("text", "INFO", out)
    calls: list[int] = []

    async def step() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("")  # an empty message: the line names the type
        if len(calls) == 3:
            raise KeyError("not expected")

    async def scenario() -> None:
        await periodic.every(lambda: 0.0, "test pass", step, expected=(ConnectionError,))

    try:
        with pytest.raises(KeyError):
            asyncio.run(scenario())
    finally:
        setup_logging()
    assert len(calls) == 3
    [line] = [line for line in out.getvalue().splitlines() if "failed" in line]
    assert line.endswith("test pass failed: ConnectionError")


def test_a_cancellation_a_step_swallowed_ends_the_loop_at_its_next_pause() -> None:
    """psycopg_pool's connection wait can lose a cancellation on Python 3.11 (its ``wait_for`` returns
    the connection that arrived at the same moment). A stop must still end the loop."""
    steps: list[int] = []
    started = asyncio.Event()

    async def step() -> None:
        steps.append(1)
        started.set()
        with contextlib.suppress(asyncio.CancelledError):  # swallowed, as the library does
            await asyncio.sleep(3600)

    async def scenario() -> None:
        task = asyncio.create_task(periodic.every(lambda: 3600.0, "test pass", step, expected=()))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert steps == [1]
