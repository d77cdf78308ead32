-- What the breaker's surge watch reads of one cluster, every half second (tasks/loops/surge.py): the
-- host's retires enqueued within the last %(window)s seconds and since the cluster's last reset-breaker
-- (a reset lets the rows it judged go). Backfill and reconciliation rows are an operator's and the
-- daemon's own, not the host's: not counted. Nor is a retire no replica may delete now: an open row a
-- pause or a hold keeps back (pod_sweeper.keeping), a row of a namespace this replica sweeps in dry run
-- (%(shadow)s; every namespace with %(dry_run)s), and a done row that was only recorded as would_delete:
-- an on-call who paused a namespace before a risky script must not see its retires trip the breaker of
-- every other namespace (the rows the pause kept are not judged again when it ends: they arrived before
-- the window). Nor are the rows of one host transaction of %(transaction_rows)s or more (its rows share
-- their enqueued_at): they are the transaction rule's, which holds that transaction alone (migration
-- 0020), before or after the claim finds it, and after an on-call released it; the surge judges the rest
-- (0: the rule is off, and the surge counts them).
-- The open ones through the claim index from the window's start up (a row is never due before its
-- enqueue), those already done through the done_at index (rows done in the window): the cost is the
-- window's rows (and, while the xmin horizon is pinned, the versions of the last lease's claims), never
-- every open row's nor the history's. Both bounds are written so that no join order loses them: the
-- window's start is a value (the breaker's row read once, an InitPlan), never a join with it, which
-- let the planner put that row inside a nested loop and read the claim index by the cluster alone,
-- every version a pinned horizon keeps (tests/integration/test_pinned_horizon.py has the statistics);
-- and the window is also said as `now()` less its seconds, which a custom plan estimates from the
-- column's statistics instead of a third of the table (a generic plan cannot: the pool prepares this
-- statement, and PostgreSQL keeps a generic plan only while it costs no more than the custom ones).
WITH b AS (
    SELECT reason,
           greatest(now() - make_interval(secs => %(window)s), coalesce(resumed_at, '-infinity')) AS since
    FROM pod_sweeper.breaker
    WHERE cluster = %(cluster)s
),
arrived AS (
    SELECT o.enqueued_at
    FROM pod_sweeper.outbox AS o
    WHERE o.cluster = %(cluster)s AND o.status IN ('pending', 'claimed')
      AND o.next_attempt_at > now() - make_interval(secs => %(window)s)
      AND o.next_attempt_at > (SELECT since FROM b)
      AND o.reason IN ('retired', 'row_deleted') AND o.enqueued_at > (SELECT since FROM b)
      AND NOT %(dry_run)s AND NOT (o.pod_namespace = ANY(coalesce(%(shadow)s::text[], '{}')))
      AND NOT EXISTS (SELECT 1 FROM pod_sweeper.keeping(o.cluster, o.pod_namespace, o.pod_name, o.pod_uid))
    UNION ALL
    SELECT o.enqueued_at
    FROM pod_sweeper.outbox AS o
    WHERE o.status = 'done' AND o.done_at > now() - make_interval(secs => %(window)s)
      AND o.done_at > (SELECT since FROM b) AND o.cluster = %(cluster)s
      AND o.reason IN ('retired', 'row_deleted') AND o.enqueued_at > (SELECT since FROM b)
      AND o.outcome IS DISTINCT FROM 'would_delete'
),
by_transaction AS (
    SELECT count(*) AS n FROM arrived GROUP BY enqueued_at
)
SELECT b.reason AS tripped_reason,
       (SELECT coalesce(sum(t.n), 0)::bigint
        FROM by_transaction AS t
        WHERE %(transaction_rows)s = 0 OR t.n < %(transaction_rows)s) AS arrived
FROM b
