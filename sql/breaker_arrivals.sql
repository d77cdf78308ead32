-- What the breaker's surge watch reads of one cluster, every half second (tasks/loops/surge.py): the
-- host's retires enqueued within the last %(window)s seconds and since the cluster's last reset-breaker
-- (a reset lets the rows it judged go). Backfill and reconciliation rows are an operator's and the
-- daemon's own, not the host's: not counted.
-- The open ones through the claim index from the window's start up (a row is never due before its
-- enqueue), those already done through the done_at index (rows done in the window): the cost is the
-- window's rows (and, while the xmin horizon is held, the versions of the last lease's claims), never
-- every open row's nor the history's.
WITH b AS (
    SELECT reason,
           greatest(now() - make_interval(secs => %(window)s), coalesce(resumed_at, '-infinity')) AS since
    FROM pod_sweeper.breaker
    WHERE cluster = %(cluster)s
)
SELECT b.reason AS tripped_reason,
       (SELECT count(*)
        FROM pod_sweeper.outbox AS o
        WHERE o.cluster = %(cluster)s AND o.status IN ('pending', 'claimed') AND o.next_attempt_at > b.since
          AND o.reason IN ('retired', 'row_deleted') AND o.enqueued_at > b.since)
       + (SELECT count(*)
          FROM pod_sweeper.outbox AS o
          WHERE o.status = 'done' AND o.done_at > b.since AND o.cluster = %(cluster)s
            AND o.reason IN ('retired', 'row_deleted') AND o.enqueued_at > b.since) AS arrived
FROM b
