-- Seconds until the next row of %(cluster)s becomes claimable (a backoff ending or a lease expiring);
-- NULL when it has no open row. The sweeper sleeps until then rather than on a fixed tick. A row a
-- pause or a hold keeps back (pod_sweeper.keeping, migration 0015) is not due before the pause or the
-- hold ends: their ends count as due times too (one needless claim at most, when nothing was behind them).
SELECT extract(epoch FROM least(
    (SELECT min(o.next_attempt_at) FROM pod_sweeper.outbox AS o
     WHERE o.status IN ('pending', 'claimed') AND o.cluster = %(cluster)s
       AND NOT EXISTS (SELECT 1 FROM pod_sweeper.keeping(o.cluster, o.pod_namespace, o.pod_name, o.pod_uid))),
    (SELECT min(until) FROM pod_sweeper.pauses WHERE cluster = %(cluster)s AND until > now()),
    (SELECT min(until) FROM pod_sweeper.holds WHERE cluster = %(cluster)s AND until > now())
) - now())::float8 AS seconds
