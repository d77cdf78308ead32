UPDATE pod_sweeper.reconcile_state
SET last_finished_at = now(), last_pods_seen = %(seen)s, last_enqueued = %(enqueued)s, last_error = %(error)s,
    last_suspects = (SELECT count(*) FROM pod_sweeper.suspects)
RETURNING last_suspects
