"""The breaker's transaction rule in the simulator: large host transactions, kept back until an on-call
ends them.

In about one run of ``LARGE_ONE_IN`` (drawn from a stream of its own, ``"{seed}:large"``, so the runs that
do not draw it replay as before it) every replica runs with a small ``POD_SWEEPER_BREAKER_TRANSACTION_ROWS``
(5 to 12) and the world retires one or two batches of rows, each in ONE host transaction (the memory
store's ``Row.transaction``): at the threshold or above it, or one row short of it. The claim that first
takes rows of a large one finds it and is rolled back, and the claimer keeps its rows back
(``MemoryStore``'s forms of sql/breaker_transaction.sql and sql/large_transaction_keep.sql,
``harness.memlarge``). The on-call releases or discards a kept transaction now and then
(``pod-sweeper release-transaction ID`` / ``discard-transaction ID``: ``MemoryStore.end_transaction``, the
memory form of ``store.admin.controls.end_transaction``), and once the world has healed does one or the
other to every transaction kept back, or leaves them kept (their rows stay open at the end, by design).

``no_delete_of_a_kept_transaction`` (``check_send``): no DELETE goes out for a row of a transaction the
world retired at or above the threshold unless the on-call released that transaction first, or a
``reset-breaker`` came after its start before any claim found it (sql/breaker_transaction.sql: the reset
lets it go). A row discarded is done and never sent.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from harness.memstore import MemoryStore, Row
from sim import invariants as inv

# One run in this many draws the rule (a stream of its own): the sim tier's time grows by a few percent.
LARGE_ONE_IN = 10
FIRST_ID = 10_000  # the rows of the transactions are s10000 and on: no other row has their pods' names


@dataclass
class Large:
    """A run's transaction rule: its threshold, the transactions the script retires (when, how many rows)
    and what the on-call does."""

    rows: int  # POD_SWEEPER_BREAKER_TRANSACTION_ROWS
    batches: tuple[tuple[float, int], ...]  # (when, rows) of each transaction retired
    ends: tuple[float, ...]  # when the on-call ends one kept transaction, released or discarded
    at_heal: str  # what the on-call does with every kept transaction once healed: released, discarded or left
    rng: random.Random
    big: dict[int, float] = field(default_factory=dict)  # transaction -> its start: those at or over ``rows``
    sizes: dict[int, int] = field(default_factory=dict)  # transaction -> its rows still open, until found
    kept: set[int] = field(default_factory=set)  # transactions a claim kept back, not ended (the world's)
    released: set[int] = field(default_factory=set)

    def describe(self) -> str:
        batches = " ".join(f"{n}@{when:.3f}" for when, n in self.batches)
        return f"transaction rule: {self.rows} rows; transactions {batches}; at heal {self.at_heal}"

    def retired(self, transaction: int, at: float, size: int) -> None:
        if size >= self.rows:
            self.big[transaction], self.sizes[transaction] = at, size

    def discarded(self, row: Row, memory: MemoryStore) -> None:
        """The on-call's ``discard`` of one row: a transaction not found yet that it leaves short of the
        threshold is no longer large to the rule, which counts the rows still open (by design)."""
        transaction = row.transaction
        if transaction not in self.sizes or transaction in memory.transactions.found:
            return
        self.sizes[transaction] -= 1
        if self.sizes[transaction] < self.rows:
            del self.big[transaction], self.sizes[transaction]

    def check_send(self, row: Row, memory: MemoryStore, resumed_at: float) -> tuple[str, str] | None:
        """``no_delete_of_a_kept_transaction``: the invariant broken, and why, when a DELETE goes out for a
        row of a large transaction the on-call has not released (nor a reset let go before it was found)."""
        start = self.big.get(row.transaction)
        if start is None or row.transaction in self.released:
            return None
        if row.transaction not in memory.transactions.found and resumed_at >= start:
            return None  # reset after it began, before any claim found it: the rule no longer judges it
        return inv.KEPT_TRANSACTION, (
            f"DELETE for row {row.id} of host transaction {row.transaction} "
            f"({sum(1 for r in memory.rows.values() if r.transaction == row.transaction)} rows, the rule's "
            f"threshold {self.rows}), not released"
        )

    def choose(self) -> tuple[int, str] | None:
        """The transaction the on-call ends now, and how; None when none is kept."""
        if not self.kept:
            return None
        return self.rng.choice(sorted(self.kept)), self.rng.choice(("released", "discarded"))


def draw(seed: int, horizon: float) -> Large | None:
    """The seed's transaction rule, from a stream of its own; None in most runs."""
    rng = random.Random(f"{seed}:large")
    if rng.random() >= 1 / LARGE_ONE_IN:
        return None
    rows = rng.randint(5, 12)
    batches = tuple(
        sorted(
            (rng.uniform(0.0, horizon - 5.0), rows + rng.choice((-1, 0, 0, 1, 4))) for _ in range(rng.choice((1, 1, 2)))
        )
    )
    ends = tuple(rng.uniform(0.0, horizon) for _ in range(rng.choice((0, 1, 2))))
    return Large(rows, batches, ends, rng.choice(("released", "discarded", "left")), rng)
