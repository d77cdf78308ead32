"""The simulator's command: run many seeds, or replay one (docs/design.md, "The simulator").

    .venv/bin/python -m tests.sim --seeds 100000 --jobs 2      # seeds 0..99999; failures with their replay
    .venv/bin/python -m tests.sim --seed 4242                   # one seed again: its trace, its verdict
    .venv/bin/python -m tests.sim --seed 4242 --shrink          # and its shortest schedule, saved to replay
    .venv/bin/python -m tests.sim --seeds 10000 --mutant fence_dropped --first

The first failure of a ``--seeds`` run is shrunk too, and its schedule saved.

String hashing is fixed (``PYTHONHASHSEED=0``, the command starts itself again with it when it is not),
so a seed replays the same in any process. Exit 1 when a seed broke an invariant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "tests.sim", *(sys.argv[1:] if argv is None else argv)])
    sys.path.insert(0, str(TESTS))
    from sim.mutants import MUTANTS
    from sim.runner import replay, run_many

    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--seeds", type=int, help="run this many seeds, from --start")
    what.add_argument("--seed", type=int, help="replay one seed: print its trace and what it broke")
    parser.add_argument("--start", type=int, default=0, help="the first seed of --seeds (default 0)")
    parser.add_argument("--jobs", type=int, default=1, help="processes for --seeds (default 1)")
    parser.add_argument("--mutant", choices=sorted(MUTANTS), help="put this bug back first (tests/sim/mutants.py)")
    parser.add_argument("--first", action="store_true", help="stop each process at its first failure")
    parser.add_argument("--schedule", help="replay --seed on the choices saved in this file (by --shrink)")
    parser.add_argument("--shrink", action="store_true", help="shrink --seed's failure and save its schedule")
    args = parser.parse_args(argv)

    if args.seed is not None:
        forced = None
        if args.schedule:
            with open(args.schedule) as saved:
                forced = [int(choice) for choice in json.load(saved)]
        world, failure = replay(args.seed, args.mutant, forced)
        print("\n".join(world.trace))
        print(f"seed {args.seed}: {world.loop.steps} steps, trace {world.digest()[:16]}")
        if failure is None:
            print("every invariant held")
            return 0
        print(failure)
        if args.shrink:
            _shrink(failure)
        return 1

    tally = run_many(args.start, args.seeds, jobs=args.jobs, mutant=args.mutant, first_only=args.first)
    for failure in tally.failures:
        print(failure)
    if tally.failures:
        _shrink(tally.failures[0])
    print(
        f"{tally.seeds} seeds in {tally.seconds:.1f} s on {args.jobs} process(es): {tally.per_second:.0f} schedules/s, "
        f"{tally.steps / max(1, tally.seeds):.0f} steps each; {len(tally.failures)} broke an invariant"
    )
    return 1 if tally.failures else 0


def _shrink(failure: object) -> None:
    from sim.runner import Failure, shrink

    assert isinstance(failure, Failure)
    shrunk = shrink(failure)
    folder = os.path.join(tempfile.gettempdir(), "pod-sweeper-sim")
    os.makedirs(folder, exist_ok=True)
    suffix = f"-{failure.mutant}" if failure.mutant else ""
    print(f"seed {failure.seed} {shrunk}")
    print(f"  replay the shrunk schedule: {shrunk.save(os.path.join(folder, f'seed-{failure.seed}{suffix}.json'))}")


if __name__ == "__main__":
    sys.exit(main())
