"""The breaker's transaction rule in memory (migration 0020), for the memory store and the simulator.

The rule is the claim's: one host transaction that retired ``POD_SWEEPER_BREAKER_TRANSACTION_ROWS`` or
more rows is found by the first claim that takes any of its rows, and that claim is rolled back (none of
it sent or charged); the claimer then keeps the transaction's pending rows back as one batch
(``pod_sweeper.large_transactions``) until an on-call releases it (``pod-sweeper release-transaction
ID``: its kept-back rows are due now, and the rule never judges it again) or discards its rows
(``discard-transaction ID``: its pending rows end done, outcome discarded). A row is kept back by its
due time, ``pod_sweeper.kept_back_until()``, which no claim or next-due read reaches; ``explain`` and
``status`` say ``large_transaction`` of every open row of a transaction not ended
(``pod_sweeper.keeping``'s ``transaction``).

PostgreSQL knows a host transaction by its start, which every row it retired has as its enqueued_at; a
memory row carries the transaction it came from (``Row.transaction``, which whoever retires it decides:
``HostTransactions.begin`` gives a new one), since the simulator retires many rows, each in a
transaction of its own, at one virtual instant. ``HostTransactions`` is shared by every view of one
memory store; its ``judge``, ``keep``, ``end`` and ``keeping`` are sql/breaker_transaction.sql (with
store/sweep/outbox.py's ``_transaction_rule`` around it), sql/large_transaction_keep.sql,
sql/large_transaction_end.sql and keeping's ``transaction``, held to them by
tests/integration/test_store_contract.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pod_sweeper.core.states import Outcome, Status

# pod_sweeper.kept_back_until() (9999-01-01 UTC), on the memory store's clock: no claim reaches it.
KEPT_BACK_UNTIL = 253370764800.0
# store.sweep.outbox.HOST_REASONS: the rows the rule counts (a reconciliation pass's enqueue is not the host's).
HOST_REASONS = ("retired", "row_deleted")


class HostRow(Protocol):
    """What the rule reads and writes of a memory row (``harness.memstore.Row``)."""

    id: int
    status: Status
    outcome: Outcome | None
    reason: str
    next_attempt_at: float
    enqueued_at: float
    transaction: int
    last_error: str | None
    done_at: float | None


@dataclass
class Found:
    """One row of ``pod_sweeper.large_transactions``: a large transaction a claim found."""

    id: int
    transaction: int
    enqueued_at: float
    rows_found: int
    reason: str
    found_by: str
    ended: str | None = None  # 'released' or 'discarded', once an on-call ended it


@dataclass
class HostTransactions:
    """The host transactions of one outbox: the last one begun (``begin``), the large ones found (by
    transaction), and the breaker's last reset (``pod_sweeper.breaker.resumed_at``), before which no
    transaction is judged."""

    begun: int = 0
    found: dict[int, Found] = field(default_factory=dict)
    reset_at: float = float("-inf")

    def begin(self) -> int:
        """A new host transaction: its id, for the rows it retires."""
        self.begun += 1
        return self.begun

    def keeping(self, row: HostRow) -> Found | None:
        """The large transaction not ended that keeps the row (keeping's ``transaction``), if any."""
        found = self.found.get(row.transaction)
        return found if found is not None and found.ended is None else None

    def judge(self, taken: Sequence[HostRow], rows: Iterable[HostRow], limit: int) -> tuple[int, int] | None:
        """store/sweep/outbox.py's ``_transaction_rule`` over sql/breaker_transaction.sql, before the claim of
        ``taken`` (each row as it was before it) applies: the first transaction this claim took any row of,
        not begun before the breaker's last reset nor found before, whose share here and rows still pending
        and due at their enqueue (not taken) come to ``limit`` or more: (size, transaction). None: the
        claim goes on."""
        shares = Counter(r.transaction for r in taken if r.reason in HOST_REASONS and r.status is Status.PENDING)
        starts = {r.transaction: r.enqueued_at for r in taken}
        keys = list(shares)
        if not keys:
            return None
        ids = {r.id for r in taken}
        rows = list(rows)
        for key in keys:
            if starts[key] <= self.reset_at or key in self.found:
                continue
            pending = sum(
                1
                for r in rows
                if r.transaction == key
                and r.id not in ids
                and r.status is Status.PENDING
                and r.next_attempt_at == r.enqueued_at
                and r.reason in HOST_REASONS
            )
            if (size := shares[key] + min(pending, limit)) >= limit:
                return size, key
        return None

    def keep(
        self, rows: Iterable[HostRow], transaction: int, *, at: float, size: int, reason: str, who: str
    ) -> int | None:
        """sql/large_transaction_keep.sql: the transaction recorded once (its id; None: found already),
        and its pending rows, while it is not ended, due at ``KEPT_BACK_UNTIL``."""
        recorded: int | None = None
        if transaction not in self.found:
            recorded = len(self.found) + 1
            self.found[transaction] = Found(recorded, transaction, at, size, reason, who)
        if self.found[transaction].ended is None:
            for row in rows:
                if row.transaction == transaction and row.status is Status.PENDING:
                    row.next_attempt_at = KEPT_BACK_UNTIL
        return recorded

    def by_id(self, transaction_id: int) -> Found | None:
        return next((f for f in self.found.values() if f.id == transaction_id), None)

    def end(self, rows: Iterable[HostRow], transaction_id: int, *, how: str, now: float) -> tuple[int, int] | None:
        """sql/large_transaction_end.sql: ``released`` (its kept-back rows due ``now``) or ``discarded`` (its
        pending rows done, outcome discarded); once. Its open rows (as they were before) and the rows
        discarded; None when it is unknown or ended already."""
        found = self.by_id(transaction_id)
        if found is None or found.ended is not None:
            return None
        found.ended = how
        mine = [r for r in rows if r.transaction == found.transaction]
        open_rows = sum(1 for r in mine if r.status in (Status.PENDING, Status.CLAIMED))
        discarded = 0
        for row in mine:
            if row.status is not Status.PENDING:
                continue
            if how == "released" and row.next_attempt_at == KEPT_BACK_UNTIL:
                row.next_attempt_at = now
            elif how == "discarded":
                row.status, row.outcome, row.done_at = Status.DONE, Outcome.DISCARDED, now
                row.next_attempt_at, row.last_error = now, None
                discarded += 1
        return open_rows, discarded
