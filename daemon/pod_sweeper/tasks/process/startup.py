"""What a replica does with a start-up error that a person must fix: a bad setting, the schema behind
this release (or too new for it), an unreadable kubeconfig, no database URL.

``POD_SWEEPER_ON_START_ERROR`` chooses. ``exit`` (the default, and the systemd unit's): one line and
exit 2 or 3, which the unit does not restart. ``wait`` (the sidecar's): the process stays up, so that
its pod's other containers start (a native sidecar that exits at start keeps them waiting for as long
as it crash-loops): ``/livez`` answers, ``/readyz`` and ``pod_sweeper_start_error{kind}`` say why, an
ERROR line repeats with a growing pause, and the step is tried again, so a later ``migrate`` or a fixed
config file heals it without a restart. (A variable of the pod's environment changes only with a new
pod: that one waits, visibly, until the pod is replaced.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from loguru import logger

from pod_sweeper.core.backoff import Backoff
from pod_sweeper.core.errors import ConfigError, PrivilegeError, SchemaError
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import ENV_PREFIX, Settings, load_settings
from pod_sweeper.tasks.process.health import Health, HealthServer

T = TypeVar("T")

WAIT, EXIT = "wait", "exit"
_RETRY = Backoff(1.0, 60.0)  # a first retry within a second or two, then at most a minute apart
_BEAT_SECONDS = 1.0


class StartGate:
    """The start-up steps a person may have to fix, each tried until it passes (``wait``) or raised
    (``exit``). Owns ``health.start_error`` and the ``start_error`` gauge."""

    def __init__(self, mode: str, health: Health, metrics: Metrics, stop: asyncio.Event) -> None:
        self.mode, self.health, self.metrics, self.stop = mode, health, metrics, stop

    async def step(self, kind: str, attempt: Callable[[], Awaitable[T]]) -> T | None:
        """``attempt``'s result; None when a stop was asked for while waiting. A missing privilege is
        shown as kind ``privileges`` whichever step's statement met it (the schema check's first read
        already needs USAGE on the schema)."""
        tries, shown = 0, kind
        while True:
            try:
                result = await attempt()
            except (ConfigError, SchemaError, PrivilegeError) as exc:
                if self.mode != WAIT:
                    raise
                if shown != (now := "privileges" if isinstance(exc, PrivilegeError) else kind):
                    self.metrics.start_error.labels(shown).set(0)
                    shown = now
                tries += 1
                delay = _RETRY.delay(tries)
                self.health.start_error = f"{shown}: {exc}"
                self.metrics.start_error.labels(shown).set(1)
                logger.error(
                    "cannot start ({kind}): {error}; the process stays up ({prefix}ON_START_ERROR=wait) and"
                    " tries again in {delay:.0f} s",
                    kind=shown,
                    error=str(exc),
                    prefix=ENV_PREFIX,
                    delay=delay,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), delay)
                if self.stop.is_set():
                    return None
                continue
            if tries:
                logger.info("{kind}: fixed; starting", kind=shown)
            self.health.start_error = None
            self.metrics.start_error.labels(shown).set(0)
            return result


def mode_from_environment() -> str:
    """The mode before the settings can be read (a bad one is what is wrong): ``wait`` only when the
    environment says so exactly; anything else exits, as the settings' own check would say."""
    return WAIT if os.environ.get(f"{ENV_PREFIX}ON_START_ERROR", "").strip().lower() == WAIT else EXIT


def _fallback_http() -> tuple[str, int]:
    """Where to answer the probes while the settings cannot be read: their values where each alone is
    valid, else the defaults (the probes of the shipped manifests ask there)."""
    fields = Settings.model_fields
    host = os.environ.get(f"{ENV_PREFIX}HTTP_HOST", "").strip() or str(fields["http_host"].default)
    try:
        port = int(os.environ.get(f"{ENV_PREFIX}HTTP_PORT", ""))
    except ValueError:
        port = int(fields["http_port"].default)
    return host, port if 0 <= port <= 65535 else int(fields["http_port"].default)


async def settings_when_valid(error: ConfigError) -> Settings | None:
    """With ``wait``: serve the probes and read the settings again with a growing pause until they are
    valid (a config file may be fixed meanwhile); None when SIGTERM or SIGINT came first."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    health, metrics = Health(), Metrics()
    host, port = _fallback_http()
    server = HealthServer(host, port, health, metrics) if port else None
    if server is not None:
        server.start()
    beat = asyncio.create_task(_beat(health))
    first = True

    async def read() -> Settings:
        nonlocal first
        if first:  # the error that brought us here, reported as the first failure
            first = False
            raise error
        return load_settings()

    try:
        return await StartGate(WAIT, health, metrics, stop).step("settings", read)
    finally:
        beat.cancel()
        if server is not None:
            server.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def _beat(health: Health) -> None:
    """The loop's beat while it waits for valid settings: /livez answers."""
    while True:
        health.heartbeat = time.monotonic()
        await asyncio.sleep(_BEAT_SECONDS)
