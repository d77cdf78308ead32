"""What the unit tests of the sweep pipeline's tasks share: the in-memory store on a fake clock, an API
client that answers as it is told (``ScriptedKube``), and the tasks built as the sweeper builds them.

``ScriptedKube`` stands only where the answer's shape is the real one: ``kube.answer.Answer``, which the
real API server's answers are read into in tests/realkube/test_semantics.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from harness.clock import FakeClock
from harness.memstore import MemoryStore
from pod_sweeper.core.metrics import Metrics
from pod_sweeper.core.settings import Settings
from pod_sweeper.kube.answer import Answer
from pod_sweeper.kube.interface import PodEvent
from pod_sweeper.store import db
from pod_sweeper.tasks.loops.outage import OutageWatch
from pod_sweeper.tasks.sweep.pipeline import Pipeline
from pod_sweeper.tasks.sweep.sweeper import Sweeper


def settings(**overrides: Any) -> Settings:
    """The daemon's settings for a unit test: nothing here opens a connection with them."""
    values: dict[str, Any] = {
        "database_url": "postgresql://nobody@nowhere.invalid/none",
        "http_port": 0,
        "max_deletes_per_minute": 0,
        "breaker_surge_factor": 0,
        "breaker_transaction_rows": 0,
        "events": False,
        "listen": False,  # poll-only: nothing arms or clears a wakeup flag
        "poll_interval": 0.05,
        "backoff_base": 0.01,
        "backoff_max": 0.05,
        "rate_limit_qps": 0,
        **overrides,
    }
    return Settings(**values)


@dataclass
class ScriptedKube:
    """The sweep's ``kube.interface.SweepKube``, as the unit tests need it: every DELETE is answered by
    ``answer`` (a 200 unless told otherwise), and a pod named in ``hold`` is answered only once
    ``release`` is set."""

    answer: Callable[[str], Answer] = lambda name: Answer.of(200)
    hold: frozenset[str] = frozenset()
    release: threading.Event = field(default_factory=threading.Event)
    calls: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def delete_pod(self, namespace: str, name: str, uid: str, *, timeout: float, dry_run: bool = False) -> Answer:
        with self._lock:
            self.calls.append(name)
        if name in self.hold:
            self.release.wait(timeout=30)
        return self.answer(name)

    def probe(self, *, timeout: float) -> Answer:
        return Answer.of(200)  # the server answers its health check: a failed request is the row's own trouble

    def create_event(self, event: PodEvent, *, timeout: float) -> Answer:
        return Answer.of(201)


@dataclass
class Rig:
    """One replica's sweeper on the memory store."""

    store: MemoryStore
    clock: FakeClock
    kube: ScriptedKube
    sweeper: Sweeper
    metrics: Metrics

    def count(self, name: str, **labels: str) -> float:
        return self.metrics.value(name, **labels)

    def retire(self, n: int) -> None:
        """Sandboxes ``s0`` .. ``s<n-1>`` retired: a row each, due now."""
        for i in range(n):
            self.store.retire(f"s{i}")

    async def claim(self, queued: int) -> None:
        """The claimer runs until ``queued`` rows wait in the pipeline for a worker, then stops."""
        pipeline = self.sweeper.pipeline
        await running(self.sweeper.claimer.run(), lambda: until(lambda: pipeline.queued == queued, what="the claim"))


def rig(kube: ScriptedKube | None = None, **overrides: Any) -> Rig:
    clock = FakeClock()
    store = MemoryStore(clock)
    kube = kube or ScriptedKube()
    config, metrics = settings(**overrides), Metrics()
    # The outage watch's pool is made and never opened: the watch takes a connection only to record an
    # outage, and here the server always answers its probe (a use would fail: the pool is not open).
    outage = OutageWatch(config, db.make_pool(config, max_size=1), kube, metrics)
    sweeper = Sweeper(config, store, kube, outage=outage, metrics=metrics, clock=clock)
    return Rig(store, clock, kube, sweeper, metrics)


async def until(predicate: Callable[[], bool], *, timeout: float = 10.0, what: str = "condition") -> None:
    """Let the tasks run until ``predicate`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


async def running(task: Awaitable[None], body: Callable[[], Awaitable[None]]) -> None:
    """Run ``body`` while ``task`` runs beside it; the task is cancelled after (its failure is raised)."""
    background = asyncio.ensure_future(task)
    try:
        await body()
        if background.done():
            background.result()
    finally:
        background.cancel()
        await asyncio.gather(background, return_exceptions=True)


def held(pipeline: Pipeline) -> int:
    """Rows the pipeline holds (claimed and not yet written): its capacity less its room."""
    return pipeline.capacity - pipeline.free
