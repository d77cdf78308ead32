"""The reconciliation pass's statements in memory, beside the outbox of ``harness.memstore``: for the
simulator (tests/sim/reconcile.py), which runs the real ``tasks.loops.reconciler.Reconciler`` over them.

Each method is one statement of ``store/sweep/quarantine.py`` (sql/reconcile_begin.sql, reconcile_suspect,
reconcile_forget, reconcile_enqueue, reconcile_prune, reconcile_finish) or the pass's read of the attached
tables (``store.sweep.recheck.generations``), applied whole, with the database's clock the store's.
``tests/integration/test_store_contract.py`` holds them to PostgreSQL. What it keeps: the one cluster's
lease row, the suspects in quarantine, and the host's execution rows as the pass reads them
(``executions``: (sandbox_id, generation) -> active; a generation the memory store's ``activate`` made
active again counts as an active row too). Not modelled: several clusters, a key that does not fit the
host's column types, an attachment whose table is gone, the enqueue's NOTIFY and wakeup flag.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from harness.memstore import MemoryStore, Row
from pod_sweeper.store.sweep.quarantine import Sighting


@dataclass
class Suspect:
    """One row of ``pod_sweeper.suspects``."""

    sighting: Sighting
    first_seen_at: datetime
    last_seen_at: datetime


def at(seconds: float) -> datetime:
    """A time on the store's clock as the database gives it (``timestamptz``, to the microsecond)."""
    return datetime.fromtimestamp(seconds, UTC)


class MemoryReconcile:
    """The reconciliation pass's rows for one cluster, over ``store``'s outbox and clock."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.executions: dict[tuple[str, int], bool] = {}  # the attached host table: key -> active
        self.suspects: dict[str, Suspect] = {}  # pod UID -> its suspect row
        # The lease row (pod_sweeper.reconcile_state).
        self.last_started_at: datetime | None = None
        self.last_finished_at: datetime | None = None
        self.last_replica: str | None = None
        self.last_error: str | None = None
        self.last_suspects = 0

    def now(self) -> datetime:
        return at(self.store.clock())

    # --- the attached tables (store.sweep.recheck.generations, one attachment) ---------------------------

    def active(self, key: tuple[str, int]) -> bool | None:
        """What the host's rows of ``key`` say: True (one is active), False (all retired), None (no row)."""
        if key in self.store._active:
            return True
        return self.executions.get(key)

    def generation_rows(self, keys: Sequence[tuple[str, int]]) -> dict[int, bool]:
        """The pass's statement on the one attached table (``recheck._generation_query``): for each index
        of ``keys`` the table has, whether some row of it is active."""
        return {i: found for i, key in enumerate(keys) if (found := self.active(key)) is not None}

    # --- the statements ------------------------------------------------------------------------------

    def begin(self, *, replica: str, gap: float, lease: float) -> datetime | None:
        """sql/reconcile_begin.sql: the pass's start, or None when it is not this replica's turn."""
        now = self.now()
        started, finished = self.last_started_at, self.last_finished_at
        free = started is None or (
            started <= now - timedelta(seconds=gap)
            and ((finished is not None and finished >= started) or started <= now - timedelta(seconds=lease))
        )
        if not free:
            return None
        self.last_started_at, self.last_replica, self.last_error = now, replica, None
        return now

    def sight(self, sightings: list[Sighting], *, started_at: datetime, quarantine: float) -> set[str]:
        """sql/reconcile_suspect.sql: record the sightings; the UIDs whose quarantine is over."""
        now, due = self.now(), set()
        for sighting in sightings:
            old = self.suspects.get(sighting.pod_uid)
            first = now
            if old is not None:
                before = old.sighting
                same = (before.sandbox_id, before.generation, before.pod_name) == (
                    sighting.sandbox_id,
                    sighting.generation,
                    sighting.pod_name,
                )
                first = old.first_seen_at if same else now
            self.suspects[sighting.pod_uid] = Suspect(sighting, first, now)
            if first < started_at and first <= now - timedelta(seconds=quarantine):
                due.add(sighting.pod_uid)
        return due

    def forget(self, uids: list[str]) -> None:
        """sql/reconcile_forget.sql."""
        for uid in uids:
            self.suspects.pop(uid, None)

    def enqueue(self, uids: list[str]) -> int:
        """sql/reconcile_enqueue.sql: the confirmed suspects no hold keeps become outbox rows (reason
        ``reconciled``) through ``pod_sweeper.enqueue``: a UID whose row is open or finished is left to it,
        one that ended skipped_active is reopened. How many were new or reopened."""
        store, now = self.store, self.store.clock()
        by_uid = {str(row.pod_uid): row for row in store.rows.values()}
        enqueued = 0
        for uid in dict.fromkeys(uids):
            suspect = self.suspects.get(uid)
            if suspect is None or f"uid:{uid}" in store._kept:  # a hold keeps it quarantined; a pause does not
                continue
            del self.suspects[uid]
            s = suspect.sighting
            row = by_uid.get(uid)
            if row is None:
                row = Row(
                    len(store.rows) + 1,
                    s.sandbox_id,
                    s.generation,
                    s.pod_namespace,
                    s.pod_name,
                    uuid.UUID(uid),
                    now,
                    reason="reconciled",
                    enqueued_at=now,
                )
                row.enqueue_lsn = store.wrote()  # the enqueue's own WAL position, which the guard's mark vouches for
                store.rows[row.id] = by_uid[uid] = row
            elif store.reopen(
                row, sandbox_id=s.sandbox_id, generation=s.generation, name=s.pod_name, reason="reconciled"
            ):
                row.pod_namespace = s.pod_namespace
            else:
                continue
            enqueued += 1
        return enqueued

    def prune(self, *, started_at: datetime) -> None:
        """sql/reconcile_prune.sql: after a complete listing, the suspects it did not see are forgotten."""
        for uid in [u for u, s in self.suspects.items() if s.last_seen_at < started_at]:
            del self.suspects[uid]

    def finish(self, *, replica: str, started_at: datetime, seen: int, enqueued: int, error: str | None) -> int | None:
        """sql/reconcile_finish.sql: the pass recorded and the lease handed back if it still holds it; the
        suspects in quarantine then, or None (another's pass took the lease over)."""
        if self.last_replica != replica or self.last_started_at != started_at:
            return None
        self.last_finished_at, self.last_error = self.now(), error
        self.last_suspects = len(self.suspects)
        return self.last_suspects
