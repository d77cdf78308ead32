"""The background loops' one shape: an expected failure is one log line and the loop goes on; anything
else ends the task."""

from __future__ import annotations

import asyncio
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
