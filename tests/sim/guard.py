"""The replication guard in the simulator (issue 53): standbys that fall behind, and what a failover to
one of them could lose.

In about one run of ``GUARD_ONE_IN`` (drawn from a stream of its own, ``"{seed}:guard"``, so the runs that
do not draw it replay as before it) every replica runs with ``POD_SWEEPER_REPLICATION_GUARD`` naming one
or two standbys, and the world has those standbys. Each flushes the primary's WAL (the memory store's
``Replication``: every write applied advances the insert position) a few milliseconds behind it, except in
the episodes the seed draws: it falls behind for seconds (its flush position stands still, then catches
up at once) or it disconnects for seconds (gone from ``pg_stat_replication``, its flush position standing
still; it comes back caught up). Every episode ends within the script's horizon, so the healed world
sweeps every row. The script may also retire again a generation whose row ended skipped_active (its
generation active again at its claim): the trigger reopens the row (``MemoryStore.reopen``), with a new
enqueue the old mark does not vouch for.

The daemon sees the standbys only as the memory store's ``pg_stat_replication`` shows them (``Standbys``,
read at each statement); the world judges by what each standby has really flushed, connected or not:
``no_delete_before_the_standbys_flush_its_retire`` (``check_send``) holds that no DELETE goes out for a
row whose enqueue (its WAL position, ``Row.enqueue_lsn``) some named standby has not flushed at that
moment: a failover to it then would lose the retire, and the pod would be deleted for a generation the
new primary still shows active.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from harness.memstore import Replication, Row
from sim import invariants as inv
from sim.loop import SimLoop

# One run in this many draws the guard (a stream of its own): the sim tier's time grows by a few percent.
GUARD_ONE_IN = 10
STANDBYS = ("standby-a", "standby-b")


@dataclass(frozen=True)
class Episode:
    """From ``start`` to ``end`` (the loop's virtual time) the standby's flush position stands still;
    ``gone``: it is not connected either."""

    start: float
    end: float
    gone: bool


@dataclass(frozen=True)
class Standby:
    name: str
    lag: float  # how far behind the primary's writes it flushes, when it keeps up
    episodes: tuple[Episode, ...]

    def _episode(self, now: float) -> Episode | None:
        return next((e for e in self.episodes if e.start <= now < e.end), None)

    def flushed(self, replication: Replication, now: float) -> int:
        """The WAL position it has flushed at ``now`` (connected or not): every write applied at least
        ``lag`` seconds before now, or before the episode it is in began."""
        episode = self._episode(now)
        upto = (now if episode is None else episode.start) - self.lag
        return bisect.bisect_right(replication.at, upto)

    def connected(self, now: float) -> bool:
        episode = self._episode(now)
        return episode is None or not episode.gone


class Standbys(Mapping[str, int | None]):
    """``pg_stat_replication`` as the memory store reads it: each connected standby's flush position,
    None for one that is not connected."""

    def __init__(self, guard: Guard, replication: Replication, loop: SimLoop) -> None:
        self.guard, self.replication, self.loop = guard, replication, loop

    def __getitem__(self, name: str) -> int | None:
        standby = self.guard.standbys[name]
        now = self.loop.time()
        return standby.flushed(self.replication, now) if standby.connected(now) else None

    def __iter__(self) -> Iterator[str]:
        return iter(self.guard.standbys)

    def __len__(self) -> int:
        return len(self.guard.standbys)


@dataclass
class Guard:
    """A run's replication guard: the standbys the replicas' guard names, and their schedules."""

    names: list[str]
    standbys: dict[str, Standby]
    reopens: tuple[float, ...] = ()  # when, in the script, a generation ended skipped_active is retired again

    def describe(self) -> str:
        parts = []
        for standby in self.standbys.values():
            episodes = " ".join(
                f"{'gone' if e.gone else 'behind'} {e.start:.3f}..{e.end:.3f}" for e in standby.episodes
            )
            parts.append(f"{standby.name} lag {standby.lag * 1000:.1f} ms {episodes}".rstrip())
        return "replication guard: " + "; ".join(parts)

    def unflushed(self, row: Row, replication: Replication, now: float) -> list[str]:
        """The named standbys that have not flushed the row's enqueue at ``now`` (virtual time)."""
        return [name for name in self.names if self.standbys[name].flushed(replication, now) < row.enqueue_lsn]

    def keeps_back(self, row: Row, replication: Replication, now: float) -> bool:
        """What the world knows keeps the row from a claim: its mark vouches for no enqueue of it, or a
        named standby is not connected, or has not flushed the mark."""
        if row.guard_enqueued_at != row.enqueued_at or row.guard_lsn is None:
            return True
        for name in self.names:
            standby = self.standbys[name]
            if not standby.connected(now) or standby.flushed(replication, now) < row.guard_lsn:
                return True
        return False


def draw(seed: int, began: float, horizon: float) -> Guard | None:
    """The seed's replication guard, from a stream of its own, its episodes within ``horizon`` seconds
    from ``began``; None in most runs."""
    rng = random.Random(f"{seed}:guard")
    if rng.random() >= 1 / GUARD_ONE_IN:
        return None
    names = list(STANDBYS[: rng.choice((1, 1, 2))])
    standbys = {}
    for name in names:
        episodes = []
        for _ in range(rng.choice((0, 1, 2, 3))):
            start = began + rng.uniform(0.0, horizon - 1.0)
            end = min(began + horizon, start + rng.uniform(0.5, 8.0))
            episodes.append(Episode(start, end, gone=rng.random() < 0.4))
        lag = rng.choice((0.0005, 0.002, 0.01, 0.03))
        standbys[name] = Standby(name, lag, tuple(sorted(episodes, key=lambda e: e.start)))
    reopens = tuple(rng.uniform(0.0, horizon) for _ in range(rng.choice((0, 1, 2))))
    return Guard(names, standbys, reopens)


def check_send(guard: Guard, row: Row, replication: Replication, now: float) -> tuple[str, str] | None:
    """``no_delete_before_the_standbys_flush_its_retire``: the invariant broken, and why, when a DELETE
    goes out for a row whose enqueue a named standby has not flushed."""
    behind = guard.unflushed(row, replication, now)
    if not behind:
        return None
    return inv.GUARD_FLUSHED, (
        f"DELETE for row {row.id} (enqueued at WAL {row.enqueue_lsn}) while {', '.join(behind)} had flushed only "
        + ", ".join(f"{guard.standbys[n].flushed(replication, now)}" for n in behind)
    )
