-- Before a sweeper sleeps: set the wakeup flag, so that retires NOTIFY again, but only when no
-- enqueue that may have read the flag clear is still open (none holds the shared lock on the key).
-- One row back: (armed, newly). newly: this statement armed it (or named itself in it), so the caller
-- claims once more before it sleeps (what committed before was not announced to it). Not newly: it
-- was armed already, and nothing is left to claim again: no enqueue can have read it clear since it was
-- armed (the arming waited for those), and whoever armed it claimed once more after. No row: a writer is
-- still open (or another sweeper holds the row), so do not sleep long; so too when the flag was to be
-- named by this replica (it names nobody, or it is taken over) and a writer holds the lock: that writer
-- may have read the old name, and would wake nobody. Migration 0007 explains the race.
-- Neither lock is waited for: the row first (SKIP LOCKED), then the advisory lock (try), so that the
-- exclusive advisory lock, which every new retire would queue behind, is held only for this statement
-- (the claimer runs it on its own, after its turn has committed, and only when the turn read the flag
-- as clear or naming nobody: store/sweep/pgstore.py arming_needed).
-- A flag already armed is left as it is, and so is the replica it names (the one retires wake,
-- migration 0018): every write of this one row is a version that each retire and claim reads past
-- while the xmin horizon is pinned (docs/design.md, "A pinned xmin horizon"). With %(take_over)s, a flag
-- armed by another replica is made this one's: that replica did not claim what its wakeups announced
-- (it stopped, crashed or lost its listener), as this sweeper's claim just found; and a flag that
-- names nobody (its replica handed it on: sql/wakeup_hand_on.sql) is made this one's. Cleared by another
-- sweeper meanwhile: that sweeper is awake and claims again before it sleeps, as with any clearing.
WITH current AS (
    SELECT armed, changed_by FROM pod_sweeper.wakeup WHERE cluster = %(cluster)s
),
flag AS (
    SELECT cluster FROM pod_sweeper.wakeup
    WHERE cluster = %(cluster)s
      AND (NOT armed OR changed_by IS NULL OR (%(take_over)s AND changed_by <> %(owner)s))
    FOR UPDATE SKIP LOCKED
),
lock AS (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS free FROM flag
),
armed AS (
    UPDATE pod_sweeper.wakeup AS w
    SET armed = true, changed_at = now(), changed_by = %(owner)s
    FROM lock
    WHERE lock.free AND w.cluster = %(cluster)s
    RETURNING w.armed
)
SELECT armed, true AS newly FROM armed
UNION ALL
SELECT armed, false FROM current WHERE armed AND NOT EXISTS (SELECT 1 FROM flag)
