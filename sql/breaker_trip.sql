-- Trip one cluster's breaker (once: a tripped breaker keeps its first reason).
UPDATE pod_sweeper.breaker
SET tripped_at = now(), reason = %(reason)s, tripped_by = %(who)s
WHERE cluster = %(cluster)s AND tripped_at IS NULL
