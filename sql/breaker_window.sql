-- The breaker's view of one cluster, read right after breaker_lock.sql locked its row for the claim's
-- transaction (so that two replicas of the cluster cannot spend the same budget), in a snapshot taken
-- after that lock was granted: its state, the cluster's rows claimed right now (deletes that may still
-- happen: a lease still running, or a row its replica may still hold, the replica live by its heartbeat,
-- pod_sweeper.replicas; a lease that ran out under a replica gone is no delete to come, and counted, such
-- rows as many as the ceiling kept the breaker tripped for ever: their leases can be taken over only by a
-- claim, which the spent budget no longer allowed; issue 53's simulator found it), and the cluster's
-- deletes recorded (all replicas') since the
-- later of a minute ago and its last resume, per namespace. One row per namespace; namespace NULL when
-- there were none; no row when the cluster has no breaker row (cluster_rows.sql makes it at start).
-- Read in one snapshot, each row counts once: the record of its result moves it from claimed to the attempt
-- history in one statement.
WITH b AS (
    SELECT tripped_at, reason, resumed_at FROM pod_sweeper.breaker WHERE cluster = %(cluster)s
),
recent AS (
    SELECT o.pod_namespace, count(*) AS deletes
    FROM pod_sweeper.attempts AS a
    JOIN pod_sweeper.outbox AS o ON o.id = a.outbox_id
    WHERE a.result IN ('deleted', 'would_delete')
      AND a.started_at > greatest(now() - interval '1 minute', coalesce((SELECT resumed_at FROM b), '-infinity'))
      AND o.cluster = %(cluster)s
    GROUP BY o.pod_namespace
)
SELECT b.tripped_at, b.reason, recent.pod_namespace, coalesce(recent.deletes, 0) AS deletes,
       (SELECT count(*)
        FROM pod_sweeper.outbox AS o
        WHERE o.status = 'claimed' AND o.cluster = %(cluster)s
          AND (o.next_attempt_at > now()
               OR EXISTS (SELECT 1 FROM pod_sweeper.replicas AS r
                          WHERE r.replica = o.claimed_by AND pod_sweeper.replica_state(r) = 'live'))) AS claimed
FROM b LEFT JOIN recent ON true
