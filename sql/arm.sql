-- Before a sweeper sleeps: set the wakeup flag, so that retires NOTIFY again, but only when no
-- enqueue that may have read the flag clear is still open (none holds the shared lock on the key);
-- the caller then claims once more before it sleeps. One row back: armed; none: a writer is still
-- open (or another sweeper holds the row), so do not sleep long. Migration 0007 explains the race.
-- Neither lock is waited for: the row first (SKIP LOCKED), then the advisory lock (try), so that the
-- exclusive advisory lock, which every new retire would queue behind, is held only for this statement.
-- A flag already armed is left as it is: no enqueue can have read it clear since it was armed (the
-- arming waited for those), and every write of this one row is a version that each retire and claim
-- reads past while the xmin horizon is held (docs/design.md, "A held xmin horizon"). Cleared by another
-- sweeper meanwhile: that sweeper is awake and claims again before it sleeps, as with any clearing.
WITH current AS (
    SELECT armed FROM pod_sweeper.wakeup WHERE cluster = %(cluster)s
),
flag AS (
    SELECT cluster FROM pod_sweeper.wakeup WHERE cluster = %(cluster)s AND NOT armed FOR UPDATE SKIP LOCKED
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
SELECT armed FROM armed
UNION ALL
SELECT armed FROM current WHERE armed
