-- Seconds until the next row of %(cluster)s becomes claimable (a backoff ending or a lease expiring);
-- NULL when it has no open row. The sweeper sleeps until then rather than on a fixed tick. A row a
-- pause or a hold keeps back (pod_sweeper.keeping, migration 0015) is not due before the pause or the
-- hold ends: their ends count as due times too (one needless claim at most, when nothing was behind them).
-- Read from %(floor)s on, as the claim reads (store/cursor.py), and no further than %(horizon)s seconds
-- ahead (the longest the caller sleeps anyway): the claims in hand are due at their leases' ends, and
-- while the xmin horizon is held the versions of every claim of the last lease lie between. low (the
-- next due time of a row in that range, NULL: none) and now are what the cursor moves its floor up to.
WITH low AS (
    SELECT min(o.next_attempt_at) AS at
    FROM pod_sweeper.outbox AS o
    WHERE o.status IN ('pending', 'claimed') AND o.cluster = %(cluster)s AND o.next_attempt_at >= %(floor)s
      AND o.next_attempt_at <= now() + make_interval(secs => %(horizon)s)
      AND NOT EXISTS (SELECT 1 FROM pod_sweeper.keeping(o.cluster, o.pod_namespace, o.pod_name, o.pod_uid))
)
SELECT extract(epoch FROM least(
    low.at,
    (SELECT min(until) FROM pod_sweeper.pauses WHERE cluster = %(cluster)s AND until > now()),
    (SELECT min(until) FROM pod_sweeper.holds WHERE cluster = %(cluster)s AND until > now())
) - now())::float8 AS seconds,
       low.at AS low,
       now() AS now
FROM low
