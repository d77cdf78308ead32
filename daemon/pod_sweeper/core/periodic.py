"""One shape for the daemon's background loops: do a step, log a failure in one line, wait, again.

The retention, confirmation and reconciliation passes run this way; a step that fails with an
expected error (the database went away) is logged and tried again at the next tick, anything else ends
the task (and with it the process, see ``runner``). The gauges keep a loop of their own: their success
or failure is also the readiness probe's view of the database (tasks/loops/refresher.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NoReturn

from loguru import logger

from pod_sweeper.core.errors import first_line


async def every(
    interval: Callable[[], float],
    what: str,
    step: Callable[[], Awaitable[object]],
    *,
    expected: tuple[type[BaseException], ...],
) -> NoReturn:
    """Run ``step`` now and then every ``interval()`` seconds (a callable, for jitter), for ever.
    An ``expected`` failure is logged as '``what`` failed: <first line>' and the loop goes on."""
    while True:
        try:
            await step()
        except expected as exc:
            logger.warning("{what} failed: {error}", what=what, error=first_line(exc))
        await pause(interval())


async def pause(seconds: float) -> None:
    """``asyncio.sleep``, but first honour a cancellation that a library swallowed.

    On Python 3.11, ``asyncio.wait_for`` returns the result instead of raising when its inner wait
    completes at the moment the task is cancelled; psycopg_pool waits for a connection that way. A
    stop that cancels a task at that moment is lost, and a loop that sleeps and goes round again would
    keep the task group (and the process) from ever ending. The task still counts the request
    (``Task.cancelling``), so each loop's pause raises it here."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
    await asyncio.sleep(seconds)
