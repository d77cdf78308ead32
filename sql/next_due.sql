-- Seconds until the next row of %(cluster)s becomes claimable (a backoff ending or a lease expiring);
-- NULL when it has no open row. The sweeper sleeps until then rather than on a fixed tick.
SELECT extract(epoch FROM min(next_attempt_at) - now())::float8 AS seconds
FROM pod_sweeper.outbox
WHERE status IN ('pending', 'claimed') AND cluster = %(cluster)s
