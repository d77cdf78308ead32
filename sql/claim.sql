-- Claim up to %(batch)s claimable rows of %(cluster)s for %(owner)s: pending rows whose backoff has
-- ended and claimed rows whose lease expired (their replica crashed, froze or lost its network). A
-- replica serves one cluster; the claim index leads with the cluster (migration 0009).
-- SKIP LOCKED lets any number of replicas claim at once without waiting on each other; the caller
-- commits at once, so no row lock outlives this statement's transaction.
-- Every claim bumps claim_epoch (the fence for the record of its result) and is charged as an attempt.
-- Each row comes back with what it was before (was, held_by): a lease that expired is the answer
-- table's to judge (a row that crashed its daemon as many times as it has attempts goes dead; the daemon
-- decides that, in tasks/rules/verdicts.py, never here).
-- %(floor)s is where the claim starts reading the claim index (store/sweep/cursor.py): '-infinity' for a
-- discovery claim, else a position below which no open row was due when the process last looked. While
-- the xmin horizon is pinned, every version the claims and records left behind stays in the index below
-- the open rows, and a claim from the start would walk them all (bench held snapshot).
-- With the replication guard (%(guard)s: the standbys it names; NULL: off, migration 0014), a row is
-- claimed only when its mark vouches for its current enqueue and every named standby has flushed the
-- WAL up to the mark; a standby that is not connected (or positions this role may not read) holds all.
WITH standbys AS (
    SELECT CASE WHEN count(DISTINCT application_name) = cardinality(%(guard)s::text[]) THEN min(flush_lsn) END AS flushed
    FROM pg_stat_replication
    WHERE %(guard)s::text[] IS NOT NULL AND application_name = ANY(%(guard)s::text[])
),
due AS (
    SELECT id, status AS was, claimed_by AS held_by, enqueued_at, reason
    FROM pod_sweeper.outbox
    WHERE status IN ('pending', 'claimed')
      AND cluster = %(cluster)s
      AND next_attempt_at >= %(floor)s
      AND next_attempt_at <= now()
      -- An on-call's controls: a row that a pause or a hold keeps back (pod_sweeper.keeping, the one
      -- statement of that rule, migration 0015) is not claimed, so it is neither sent nor charged. (A
      -- row a large host transaction keeps back is due at pod_sweeper.kept_back_until(), migration
      -- 0020: beyond now(), so never here.)
      AND NOT EXISTS (
          SELECT 1 FROM pod_sweeper.keeping(outbox.cluster, outbox.pod_namespace, outbox.pod_name, outbox.pod_uid)
      )
      AND (%(guard)s::text[] IS NULL
           OR (outbox.guard_enqueued_at = outbox.enqueued_at
               AND outbox.guard_lsn <= (SELECT flushed FROM standbys)))
    ORDER BY next_attempt_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
),
disarm AS (
    -- This sweeper is awake and will claim again until nothing is claimable: retires need not NOTIFY
    -- (migration 0007). The claim right after arming passes false, or it would undo the arming.
    -- Clearing is only a saving, never needed for safety: a row another sweeper holds is skipped.
    -- A flag armed less than %(disarm_after)s seconds ago is left armed: under steady churn the
    -- sweepers sleep between retires, and clearing and arming again at every one made two versions of
    -- this one row per retire, which every retire and claim reads past while the xmin horizon is pinned.
    -- Only a claim that fills its batch clears it: one that takes fewer arms the flag again in its own
    -- transaction (store/sweep/outbox.py), so clearing it there was two writes of this row for nothing,
    -- on every poll of an idle replica too (bench cost). A gathering turn (%(gathering)s: the claimer
    -- paused awake after taking rows, POD_SWEEPER_GATHER_SECONDS) clears it whenever it takes a row, however
    -- recently it was armed: its replica claims again within a fraction of a second whatever comes, so
    -- the retires until then need not NOTIFY (each read by every listener, bench cost).
    UPDATE pod_sweeper.wakeup
    SET armed = false, changed_at = now(), changed_by = %(owner)s
    WHERE cluster IN (
        SELECT cluster FROM pod_sweeper.wakeup
        WHERE cluster = %(cluster)s AND armed AND %(disarm)s
          AND (%(gathering)s OR changed_at <= now() - make_interval(secs => %(disarm_after)s))
          AND (SELECT count(*) FROM due) >= CASE WHEN %(gathering)s THEN 1 ELSE %(batch)s END
        FOR UPDATE SKIP LOCKED
    )
),
firsts AS MATERIALIZED (
    -- The breaker's transaction rule's first look (store/sweep/outbox.py), with it on: for each host
    -- transaction this claim takes a pending row of, how many of its rows were pending, this claim's
    -- among them (the statement's one snapshot: as it began, before its own update), counting no
    -- further than the threshold, by one equality on the claim index. Once per transaction, not per
    -- row: a claim of 100 rows of one 300-row transaction counted 300 entries 100 times. MATERIALIZED,
    -- or the planner inlines it as the inner side of a nested loop and counts again for every row.
    -- Only a transaction that reaches the threshold here is judged by sql/breaker_transaction.sql.
    SELECT k.enqueued_at,
           (SELECT count(*)
            FROM (SELECT 1
                  FROM pod_sweeper.outbox AS s
                  WHERE s.cluster = %(cluster)s AND s.status IN ('pending', 'claimed')
                    AND s.next_attempt_at = k.enqueued_at AND s.enqueued_at = k.enqueued_at
                    AND s.status = 'pending' AND s.reason IN ('retired', 'row_deleted')
                  LIMIT %(transaction_rows)s) AS t) AS transaction_rows
    FROM (SELECT DISTINCT enqueued_at
          FROM due
          WHERE %(transaction_rows)s > 0 AND was = 'pending' AND reason IN ('retired', 'row_deleted')) AS k
)
UPDATE pod_sweeper.outbox AS o
SET status = 'claimed',
    attempts = o.attempts + 1,
    claim_epoch = o.claim_epoch + 1,
    claimed_by = %(owner)s,
    claimed_at = now(),
    next_attempt_at = now() + make_interval(secs => %(lease_seconds)s),
    updated_at = now()
FROM due LEFT JOIN firsts
     ON firsts.enqueued_at = due.enqueued_at AND due.was = 'pending' AND due.reason IN ('retired', 'row_deleted')
WHERE o.id = due.id
RETURNING o.id, o.claim_epoch, o.attachment_id, o.sandbox_id, o.generation, o.pod_namespace, o.pod_name,
          o.pod_uid, o.attempts, o.reason, o.enqueued_at, due.was, due.held_by,
          firsts.transaction_rows
