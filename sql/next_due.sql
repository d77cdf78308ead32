-- Seconds until the next row of %(cluster)s becomes claimable (a backoff ending or a lease expiring);
-- NULL when it has no open row. The sweeper sleeps until then rather than on a fixed tick. A row a
-- pause or a hold keeps back (migration 0011) is not due before the pause or the hold ends: their
-- ends count as due times too (one needless claim at most, when nothing was behind them).
SELECT extract(epoch FROM least(
    (SELECT min(o.next_attempt_at) FROM pod_sweeper.outbox AS o
     WHERE o.status IN ('pending', 'claimed') AND o.cluster = %(cluster)s
       AND NOT EXISTS (
           SELECT 1 FROM pod_sweeper.pauses AS p
           WHERE p.cluster = o.cluster AND p.pod_namespace IN ('', o.pod_namespace) AND p.until > now()
       )
       AND NOT EXISTS (
           SELECT 1 FROM pod_sweeper.holds AS h
           WHERE h.cluster = o.cluster AND h.pod_namespace = o.pod_namespace AND h.pod_name = o.pod_name
             AND h.until > now() AND (h.pod_uid IS NULL OR h.pod_uid = o.pod_uid)
       )),
    (SELECT min(until) FROM pod_sweeper.pauses WHERE cluster = %(cluster)s AND until > now()),
    (SELECT min(until) FROM pod_sweeper.holds WHERE cluster = %(cluster)s AND until > now())
) - now())::float8 AS seconds
