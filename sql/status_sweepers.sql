-- Who sweeps each cluster, at a glance (for `status`, the metrics refresher and sql/dba/alerts.sql's
-- twin): its open rows and how long the oldest has waited, its live replicas (pod_sweeper.replicas), and
-- the replicas seen at work there that keep no row in that table (a claim whose lease has not ended,
-- or the wakeup flag armed in the last hour): replicas of a release before migration 0019, sweeping
-- unseen during a rolling upgrade, so the cluster is not said to have no replica. Every cluster that
-- has open rows, a replica's row or a wakeup flag. O(open rows): the claim index.
WITH open AS (
    SELECT cluster, count(*) AS open_rows, extract(epoch FROM now() - min(enqueued_at))::float8 AS oldest_seconds
    FROM pod_sweeper.outbox
    WHERE status IN ('pending', 'claimed')
    GROUP BY cluster
),
live AS (
    SELECT r.cluster, count(*) AS replicas, count(*) FILTER (WHERE r.ready) AS ready
    FROM pod_sweeper.replicas AS r
    WHERE pod_sweeper.replica_state(r) = 'live'
    GROUP BY r.cluster
),
at_work AS (
    SELECT DISTINCT cluster, claimed_by AS replica
    FROM pod_sweeper.outbox
    WHERE status = 'claimed' AND next_attempt_at > now()
    UNION
    SELECT cluster, changed_by
    FROM pod_sweeper.wakeup
    WHERE changed_by IS NOT NULL AND changed_at > now() - interval '1 hour'
),
clusters AS (
    SELECT cluster FROM open
    UNION SELECT cluster FROM pod_sweeper.replicas
    UNION SELECT cluster FROM pod_sweeper.wakeup
)
SELECT c.cluster,
       coalesce(o.open_rows, 0) AS open_rows,
       coalesce(o.oldest_seconds, 0) AS oldest_open_seconds,
       coalesce(l.replicas, 0) AS live_replicas,
       coalesce(l.ready, 0) AS ready_replicas,
       array(SELECT w.replica FROM at_work AS w
             WHERE w.cluster = c.cluster
               AND NOT EXISTS (SELECT 1 FROM pod_sweeper.replicas AS r WHERE r.replica = w.replica)
             ORDER BY w.replica) AS unseen
FROM clusters AS c
LEFT JOIN open AS o USING (cluster)
LEFT JOIN live AS l USING (cluster)
ORDER BY (coalesce(o.open_rows, 0) > 0 AND coalesce(l.replicas, 0) = 0) DESC, c.cluster
