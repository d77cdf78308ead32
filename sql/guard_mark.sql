-- The replication guard (migration 0014), before a claim: mark %(cluster)s's open rows whose enqueue no
-- mark vouches for yet with the WAL insert position now. Every enqueue this statement can see committed
-- before it, so its commit record is before that position; a reopen committing meanwhile is waited for
-- (the row's lock) and marked after it. SKIP LOCKED: a row a claim holds is marked next time.
UPDATE pod_sweeper.outbox AS o
SET guard_lsn = pg_current_wal_insert_lsn(), guard_enqueued_at = o.enqueued_at
WHERE o.id IN (
    SELECT id FROM pod_sweeper.outbox
    WHERE cluster = %(cluster)s AND status IN ('pending', 'claimed')
      AND guard_enqueued_at IS DISTINCT FROM enqueued_at
    LIMIT 5000
    FOR UPDATE SKIP LOCKED
)
