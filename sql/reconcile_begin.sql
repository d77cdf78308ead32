-- The reconciliation pass starts, unless another replica started one less than %(gap)s seconds ago.
-- Run under the pass's session advisory lock; no row back means "not now".
UPDATE pod_sweeper.reconcile_state
SET last_started_at = now(), last_replica = %(replica)s, last_error = NULL
WHERE last_started_at IS NULL OR last_started_at <= now() - make_interval(secs => %(gap)s)
RETURNING now() AS started_at
