-- `pod-sweeper reset-breaker`: close the breaker of one cluster (or, with all_clusters, of every tripped one);
-- that cluster's delete count starts again from now. Returns each breaker touched and when it had
-- tripped (NULL: it was not tripped); the subquery reads the rows as they were before this update.
UPDATE pod_sweeper.breaker AS b
SET tripped_at = NULL, reason = NULL, tripped_by = NULL, resumed_at = now(), resumed_by = %(who)s
WHERE b.cluster = %(cluster)s OR (%(all_clusters)s AND b.tripped_at IS NOT NULL)
RETURNING b.cluster,
          (SELECT before.tripped_at FROM pod_sweeper.breaker AS before WHERE before.cluster = b.cluster)
              AS was_tripped_at
