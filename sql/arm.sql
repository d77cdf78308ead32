-- Before a sweeper sleeps: set the wakeup flag, so that retires NOTIFY again, but only when no
-- enqueue that may have read the flag clear is still open (none holds the shared lock on the key);
-- the caller then claims once more before it sleeps. One row back: armed; none: a writer is still
-- open (or another sweeper holds the row), so do not sleep long. Migration 0007 explains the race.
-- Neither lock is waited for: the row first (SKIP LOCKED), then the advisory lock (try), so that the
-- exclusive advisory lock, which every new retire would queue behind, is held only for this statement.
WITH flag AS (
    SELECT cluster FROM pod_sweeper.wakeup WHERE cluster = %(cluster)s FOR UPDATE SKIP LOCKED
),
lock AS (
    SELECT pg_try_advisory_xact_lock(%(key)s) AS free FROM flag
)
UPDATE pod_sweeper.wakeup AS w
SET armed = true, changed_at = now(), changed_by = %(owner)s
FROM lock
WHERE lock.free AND w.cluster = %(cluster)s
RETURNING w.armed
