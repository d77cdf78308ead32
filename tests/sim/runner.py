"""Many seeds, and one replayed: what the command (``python -m tests.sim``) and the tests share.

``run_many`` runs a range of seeds, on several processes if asked, and returns each failure with the
command that replays it; ``replay`` runs one seed and returns its trace. A mutant, by name, is put in
place in each process for the seeds it runs.

``shrink`` makes a failing schedule short: a schedule is the seed's world (its rows, faults and script)
and the scheduler's choice at each step where several callbacks were ready. It keeps the shortest
prefix of the choices after which asyncio's own order (the first ready) still breaks the same invariant,
then sets to the first ready every stretch of choices it can, halving the stretches, within a bound on
runs. What is left is the handful of choices that matter; ``--schedule`` replays it.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from sim.invariants import Broken
from sim.mutants import applied
from sim.world import BREAKER_AS_SQL, World


@dataclass(frozen=True)
class Failure:
    seed: int
    invariant: str
    detail: str
    mutant: str | None

    @property
    def replay(self) -> str:
        mutant = f" --mutant {self.mutant}" if self.mutant else ""
        env = "SIM_BREAKER_AS_SQL=1 " if BREAKER_AS_SQL else ""
        return f"{env}.venv/bin/python -m tests.sim --seed {self.seed}{mutant}"

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


def replay(seed: int, mutant: str | None = None, forced: list[int] | None = None) -> tuple[World, Failure | None]:
    """One seed, run again (with ``forced``: on those choices): its world (``trace``, ``digest()``) and its
    failure, if it broke anything."""
    with _maybe(mutant):
        world = World(seed, forced=forced)
        try:
            world.run()
        except Broken as broken:
            return world, Failure(seed, broken.violation.name, str(broken.violation), mutant)
    return world, None


@dataclass(frozen=True)
class Shrunk:
    choices: list[int]  # the schedule: the choice at each step with several ready, then the first ready
    original: int  # choices the failing run made
    runs: int  # runs the shrinking took
    failure: Failure

    @property
    def off_first(self) -> int:
        """Choices that are not asyncio's own order: what the failure needs."""
        return sum(1 for choice in self.choices if choice)

    def save(self, path: str) -> str:
        with open(path, "w") as out:
            json.dump(self.choices, out)
        return f"{self.failure.replay} --schedule {path}"  # the seed's own command: its mutant, its switches

    def __str__(self) -> str:
        return (
            f"shrunk in {self.runs} runs: {len(self.choices)} choices, {self.off_first} of them off asyncio's "
            f"own order (the failing run made {self.original}); it still breaks {self.failure.invariant}"
        )


def shrink(failure: Failure, *, budget: int = 300) -> Shrunk:
    """The shortest schedule found within ``budget`` runs that breaks the same invariant (see above)."""
    with _maybe(failure.mutant):
        first = World(failure.seed)
        with contextlib.suppress(Broken):
            first.run()
        best = list(first.loop.choices)
        original, runs = len(best), 1
        kept = failure

        def breaks(candidate: list[int]) -> Failure | None:
            nonlocal runs
            runs += 1
            world = World(failure.seed, forced=candidate)
            try:
                world.run()
            except Broken as broken:
                if broken.violation.name == failure.invariant:
                    return Failure(failure.seed, broken.violation.name, str(broken.violation), failure.mutant)
            return None

        low, high = 0, len(best)  # the shortest prefix: high breaks; find the least that does
        while low < high and runs < budget:
            middle = (low + high) // 2
            if (found := breaks(best[:middle])) is not None:
                high, kept = middle, found
            else:
                low = middle + 1
        best = best[:high]
        size = max(1, len(best) // 2)
        while size >= 1 and runs < budget:
            start = 0
            while start < len(best) and runs < budget:
                if any(best[start : start + size]):
                    candidate = best[:start] + [0] * len(best[start : start + size]) + best[start + size :]
                    if (found := breaks(candidate)) is not None:
                        best, kept = candidate, found
                start += size
            size //= 2
    return Shrunk(best, original, runs, kept)
