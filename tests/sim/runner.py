"""Many seeds, and one replayed: what the command (``python -m tests.sim``) and the tests share.

``run_many`` runs a range of seeds, on several processes if asked, and returns each failure with the
command that replays it; ``replay`` runs one seed and returns its trace. A mutant, by name, is put in
place in each process for the seeds it runs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from sim.invariants import Broken
from sim.mutants import applied
from sim.world import World


@dataclass(frozen=True)
class Failure:
    seed: int
    invariant: str
    detail: str
    mutant: str | None

    @property
    def replay(self) -> str:
        mutant = f" --mutant {self.mutant}" if self.mutant else ""
        return f".venv/bin/python -m tests.sim --seed {self.seed}{mutant}"

    def __str__(self) -> str:
        return f"seed {self.seed} broke {self.invariant}: {self.detail}\n  replay: {self.replay}"


@dataclass(frozen=True)
class Tally:
    seeds: int
    steps: int
    seconds: float
    failures: list[Failure]

    @property
    def per_second(self) -> float:
        return self.seeds / self.seconds if self.seconds else 0.0


@contextlib.contextmanager
def _maybe(mutant: str | None) -> Iterator[None]:
    if mutant is None:
        yield
    else:
        with applied(mutant):
            yield


def _run_range(start: int, count: int, mutant: str | None, first_only: bool) -> tuple[int, int, list[Failure]]:
    failures: list[Failure] = []
    steps = ran = 0
    with _maybe(mutant):
        for seed in range(start, start + count):
            world = World(seed)
            ran += 1
            try:
                world.run()
            except Broken as broken:
                failures.append(Failure(seed, broken.violation.name, str(broken.violation), mutant))
                if first_only:
                    break
            steps += world.loop.steps
    return ran, steps, failures


def run_many(start: int, count: int, *, jobs: int = 1, mutant: str | None = None, first_only: bool = False) -> Tally:
    """Seeds ``start`` .. ``start + count - 1``, split over ``jobs`` processes. With ``first_only`` each
    process stops at its first failure (the seeds it had not reached are not counted)."""
    began = time.perf_counter()
    if jobs <= 1:
        ran, steps, failures = _run_range(start, count, mutant, first_only)
        return Tally(ran, steps, time.perf_counter() - began, failures)
    size = -(-count // jobs)
    with ProcessPoolExecutor(jobs) as pool:
        parts = [
            pool.submit(_run_range, begin, min(size, start + count - begin), mutant, first_only)
            for begin in range(start, start + count, size)
        ]
        results = [part.result() for part in parts]
    failures = sorted((f for _, _, fs in results for f in fs), key=lambda f: f.seed)
    return Tally(sum(r for r, _, _ in results), sum(s for _, s, _ in results), time.perf_counter() - began, failures)


def replay(seed: int, mutant: str | None = None) -> tuple[World, Failure | None]:
    """One seed, run again: its world (``trace``, ``digest()``) and its failure, if it broke anything."""
    with _maybe(mutant):
        world = World(seed)
        try:
            world.run()
        except Broken as broken:
            return world, Failure(seed, broken.violation.name, str(broken.violation), mutant)
    return world, None
