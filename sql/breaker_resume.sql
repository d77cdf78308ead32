-- `pod-sweeper resume`: close the breaker; the delete count starts again from now.
UPDATE pod_sweeper.breaker
SET tripped_at = NULL, reason = NULL, tripped_by = NULL, resumed_at = now(), resumed_by = %(who)s
RETURNING (SELECT tripped_at FROM pod_sweeper.breaker) AS was_tripped_at
