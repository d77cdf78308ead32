"""The simulator's command: run many seeds, or replay one (docs/design.md, "The simulator").

    .venv/bin/python -m tests.sim --seeds 100000 --jobs 2      # seeds 0..99999; failures with their replay
    .venv/bin/python -m tests.sim --seed 4242                   # one seed again: its trace, its verdict
    .venv/bin/python -m tests.sim --seeds 10000 --mutant fence_dropped --first

String hashing is fixed (``PYTHONHASHSEED=0``, the command starts itself again with it when it is not),
so a seed replays the same in any process. Exit 1 when a seed broke an invariant.
"""

from __future__ import annotations

import argparse
import os
import sys
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
    args = parser.parse_args(argv)

    if args.seed is not None:
        world, failure = replay(args.seed, args.mutant)
        print("\n".join(world.trace))
        print(f"seed {args.seed}: {world.loop.steps} steps, trace {world.digest()[:16]}")
        if failure is not None:
            print(failure)
            return 1
        print("every invariant held")
        return 0

    tally = run_many(args.start, args.seeds, jobs=args.jobs, mutant=args.mutant, first_only=args.first)
    for failure in tally.failures:
        print(failure)
    print(
        f"{tally.seeds} seeds in {tally.seconds:.1f} s on {args.jobs} process(es): {tally.per_second:.0f} schedules/s, "
        f"{tally.steps / max(1, tally.seeds):.0f} steps each; {len(tally.failures)} broke an invariant"
    )
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
