"""The surge watch's database failing, in the simulator: how the real ``SurgeWatch`` copes, and what
``a_surge_trips_the_breaker`` excuses for it.

The watch's three statements (sql/breaker_recent_rate.sql, sql/breaker_arrivals.sql, sql/breaker_trip.sql)
go through a pool of their own (``SurgePool`` in tests/sim/world.py). Here they fail now and then, before
the world heals, at a rate the seed draws from a stream of its own (``"{seed}:surge database"``, so the
other streams draw as before; a run that draws the rate 0 runs as before it): a connection lost before a
statement applied (at the pool's checkout or at any statement), and a trip that committed but whose answer
never arrived. The watch's ``run`` logs the ``psycopg.Error`` and looks again half a second later; a
trip whose answer was lost is tripped all the same (its next look reads the breaker tripped), but the
replica's own gate has not seen it (its workers stop at their next claim's read).

What the invariant excuses: a watch whose statement failed could not judge that look, so the half second
and a tenth within which a surge must be tripped is counted, for that replica's watch, from the later
of the surge's start (by that watch's threshold) and the watch's last failed statement (``failed_at``).
A watch that keeps failing is excused while it fails; one look that goes through after the failure must
trip it.
"""

from __future__ import annotations

import random

import psycopg

# The rates the seed draws from: most runs' watch never fails, some fail now and then, a few often.
RATES = (0.0, 0.0, 0.05, 0.2)


class SurgeDatabase:
    """The surge watch's database for one run: its failure rate and each replica's last failure."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"{seed}:surge database")
        self.rate = self.rng.choice(RATES)
        self.failed_at: dict[str, float] = {}  # replica -> when its watch's last statement failed

    def fail(self, replica: str, now: float, healed: bool, what: str) -> None:
        """At the drawn rate, before the world heals: the statement ``what`` fails (raises), noted as the
        replica's last failure."""
        if healed or not self.rate or self.rng.random() >= self.rate:
            return
        self.failed_at[replica] = now
        raise psycopg.OperationalError(f"{what} (scripted)")

    def counts_from(self, replica: str) -> float:
        """When the replica's watch last failed (-inf: never): a surge counts from then at the earliest."""
        return self.failed_at.get(replica, float("-inf"))
