"""The simulator tier: the same seed gives the same run byte for byte, a CI budget of seeds breaks no
invariant, every mutant (tests/sim/mutants.py) is caught within that budget by the invariant it
breaks, a failure's replay command gives the same failure, and every invariant checked is named in
docs/design.md. The figures (schedules a second, seeds to first failure) are printed (``-s``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from sim import invariants as inv
from sim.mutants import MUTANTS
from sim.runner import replay, run_many, shrink

# At least 10,000 schedules on two processes; SIM_SEEDS runs more (or fewer, locally).
BUDGET = int(os.environ.get("SIM_SEEDS", "10000"))
DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"


def test_the_same_seed_gives_the_same_run_byte_for_byte() -> None:
    first = [replay(seed)[0] for seed in range(25)]
    again = [replay(seed)[0] for seed in range(25)]
    for a, b in zip(first, again, strict=True):
        assert a.trace == b.trace
        assert a.loop.steps == b.loop.steps > 0
    assert len({world.digest() for world in first}) == 25  # and the seeds differ from each other


# About four minutes on two idle cores (the worlds grew); a loaded machine took past the suite's five-minute limit.
@pytest.mark.timeout(900)
def test_a_ci_budget_of_seeds_breaks_no_invariant() -> None:
    tally = run_many(0, BUDGET, jobs=2)
    print(
        f"\n{tally.seeds} schedules in {tally.seconds:.1f} s on 2 processes: {tally.per_second:.0f} schedules/s, "
        f"{tally.steps / tally.seeds:.0f} steps each"
    )
    assert tally.seeds == BUDGET
    assert not tally.failures, "\n".join(str(f) for f in tally.failures[:5])


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_mutant_is_caught_within_the_budget_by_its_invariant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mutant = MUTANTS[name]
    monkeypatch.setattr(mutant.target, mutant.attribute, mutant.replacement)
    tally = run_many(0, BUDGET, first_only=True)
    assert tally.failures, f"{name} survived {BUDGET} seeds"
    failure = tally.failures[0]
    print(f"\n{name}: caught at seed {failure.seed} ({tally.seeds} seeds run) by {failure.invariant}")
    assert failure.invariant == mutant.caught_by, str(failure)


def test_a_failure_replays_from_its_seed_to_the_same_violation() -> None:
    failure = run_many(0, BUDGET, mutant="fence_dropped", first_only=True).failures[0]
    assert failure.replay == f".venv/bin/python -m tests.sim --seed {failure.seed} --mutant fence_dropped"
    world, again = replay(failure.seed, "fence_dropped")
    assert again == failure
    assert any(line.split(" ", 1)[1].startswith(f"BROKEN {failure.invariant}") for line in world.trace)
    assert replay(failure.seed)[1] is None  # the real fence holds on the same schedule


def test_a_failure_shrinks_to_a_shorter_schedule_that_breaks_the_same_invariant() -> None:
    failure = run_many(0, BUDGET, mutant="fence_dropped", first_only=True).failures[0]
    shrunk = shrink(failure)
    print(f"\nseed {failure.seed}: {shrunk}")
    assert shrunk.off_first < shrunk.original
    again = replay(failure.seed, "fence_dropped", shrunk.choices)[1]
    assert again is not None and again.invariant == failure.invariant == "no_record_over_a_newer_claim"


def test_the_design_names_every_invariant_checked_and_checks_every_invariant_it_names() -> None:
    section = DESIGN.read_text().split("### The simulator", 1)[1].split("\n## ", 1)[0]
    listed = section.split("**The invariants, each by name**", 1)[1].split("\n- **", 1)[0]
    named = set(re.findall(r"`([a-z_]+)`", listed))
    assert named == set(inv.NAMES)
