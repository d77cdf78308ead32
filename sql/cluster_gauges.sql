-- Each cluster's gauges in one read, for the metrics refresher: what waits and how long (the claim
-- index), dead rows (their own partial index), the oldest claim, and the retires the enqueue rejected
-- (a reject without a cluster counts under '(none)'). Every cluster's, so a cluster whose own replicas
-- are all down still pages from the others; each alert names its cluster.
WITH open AS (
    SELECT cluster,
           count(*) FILTER (WHERE status = 'pending') AS pending,
           coalesce(extract(epoch FROM now() - min(enqueued_at) FILTER (WHERE next_attempt_at <= now())), 0)::float8
               AS oldest_claimable_seconds,
           coalesce(extract(epoch FROM now() - min(claimed_at) FILTER (WHERE status = 'claimed')), 0)::float8
               AS oldest_claim_seconds
    FROM pod_sweeper.outbox
    WHERE status IN ('pending', 'claimed')
    GROUP BY cluster
), dead AS (
    SELECT cluster, count(*) AS dead FROM pod_sweeper.outbox WHERE status = 'dead' GROUP BY cluster
), rejected AS (
    SELECT coalesce(nullif(cluster, ''), '(none)') AS cluster, count(*) AS rejected
    FROM (SELECT cluster FROM pod_sweeper.rejects LIMIT 1000) AS r
    GROUP BY 1
)
SELECT cluster,
       coalesce(o.pending, 0) AS pending,
       coalesce(o.oldest_claimable_seconds, 0) AS oldest_claimable_seconds,
       coalesce(o.oldest_claim_seconds, 0) AS oldest_claim_seconds,
       coalesce(d.dead, 0) AS dead,
       coalesce(j.rejected, 0) AS rejected
FROM open AS o
FULL JOIN dead AS d USING (cluster)
FULL JOIN rejected AS j USING (cluster)
ORDER BY cluster
