-- 0004: the blast-radius breaker. One row: when it tripped and why, and who resumed it. It lives in
-- the database so that a trip holds across restarts and every replica, and DBAs can read it.
CREATE TABLE pod_sweeper.breaker (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),  -- exactly one row
    tripped_at  timestamptz,
    reason      text,
    tripped_by  text,
    resumed_at  timestamptz,
    resumed_by  text
);
INSERT INTO pod_sweeper.breaker DEFAULT VALUES;

-- The breaker counts the deletes of the last minute from the attempt history.
CREATE INDEX attempts_recent_deletes ON pod_sweeper.attempts (started_at)
    WHERE result IN ('deleted', 'would_delete');
