-- The pass ends and hands the lease back, if it still holds it (a pass that outlived its lease finds
-- another replica's start here and records nothing).
UPDATE pod_sweeper.reconcile_state
SET last_finished_at = now(), last_pods_seen = %(seen)s, last_enqueued = %(enqueued)s, last_error = %(error)s,
    last_suspects = (SELECT count(*) FROM pod_sweeper.suspects WHERE cluster = %(cluster)s)
WHERE cluster = %(cluster)s AND last_replica = %(replica)s AND last_started_at = %(started_at)s
RETURNING last_suspects
