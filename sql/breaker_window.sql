-- The breaker's view: its state, the rows claimed right now by any replica (deletes that may happen),
-- and the deletes recorded (all replicas') since the later of a minute ago and the last resume, per
-- namespace. One row per namespace; namespace NULL when there were none. Read in one snapshot, each
-- row counts once: the finalize moves it from claimed to the attempt history in one statement.
WITH b AS (SELECT tripped_at, reason, resumed_at FROM pod_sweeper.breaker),
     recent AS (
        SELECT o.pod_namespace, count(*) AS deletes
        FROM pod_sweeper.attempts AS a
        JOIN pod_sweeper.outbox AS o ON o.id = a.outbox_id
        WHERE a.result IN ('deleted', 'would_delete')
          AND a.started_at > greatest(now() - interval '1 minute',
                                      coalesce((SELECT resumed_at FROM b), '-infinity'))
        GROUP BY o.pod_namespace
     )
SELECT b.tripped_at, b.reason, recent.pod_namespace, coalesce(recent.deletes, 0) AS deletes,
       (SELECT count(*) FROM pod_sweeper.outbox WHERE status = 'claimed') AS claimed
FROM b LEFT JOIN recent ON true
