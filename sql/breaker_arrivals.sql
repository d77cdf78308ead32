-- What the breaker's surge watch reads of one cluster, every half second (tasks/loops/surge.py), each
-- count since the cluster's last reset-breaker, so that a reset lets the rows it judged go:
-- arrived: the host's retires enqueued within the last %(window)s seconds, the open ones through the claim
--   index (outbox_claimable) and those already done through the done_at index (rows done in the window);
-- largest_transaction: the most open rows one host transaction enqueued. The enqueue stamps a row's
--   enqueued_at with now(), its transaction's start, so a transaction's rows share it.
-- Backfill and reconciliation rows are an operator's and the daemon's own, not the host's: not counted.
-- Costs O(open rows + rows done in the window), never the done history.
WITH b AS (
    SELECT reason,
           coalesce(resumed_at, '-infinity') AS reset_at,
           greatest(now() - make_interval(secs => %(window)s), coalesce(resumed_at, '-infinity')) AS since
    FROM pod_sweeper.breaker
    WHERE cluster = %(cluster)s
), open AS (
    SELECT o.enqueued_at
    FROM pod_sweeper.outbox AS o, b
    WHERE o.cluster = %(cluster)s AND o.status IN ('pending', 'claimed')
      AND o.reason IN ('retired', 'row_deleted') AND o.enqueued_at > b.reset_at
)
SELECT b.reason AS tripped_reason,
       (SELECT count(*) FROM open WHERE open.enqueued_at > b.since)
       + (SELECT count(*)
          FROM pod_sweeper.outbox AS o
          WHERE o.status = 'done' AND o.done_at > b.since AND o.cluster = %(cluster)s
            AND o.reason IN ('retired', 'row_deleted') AND o.enqueued_at > b.since) AS arrived,
       coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM open GROUP BY enqueued_at) AS t), 0)
           AS largest_transaction
FROM b
