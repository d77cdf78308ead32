-- Trip one cluster's breaker (once: a tripped breaker keeps its first reason), and leave the trip in
-- the audit trail (migration 0011) in the same statement.
WITH tripped AS (
    UPDATE pod_sweeper.breaker
    SET tripped_at = now(), reason = %(reason)s, tripped_by = %(who)s
    WHERE cluster = %(cluster)s AND tripped_at IS NULL
    RETURNING cluster
)
INSERT INTO pod_sweeper.audit (actor, command, arguments, scope)
SELECT %(who)s, 'breaker trip', jsonb_build_object('reason', %(reason)s::text), 'cluster ' || cluster
FROM tripped
