-- The reconciliation pass takes the lease: the one reconcile_state row says who runs a pass and since
-- when. It starts when no pass is running (the last one finished) or the running one began more than
-- %(lease)s seconds ago (its replica died mid-pass), and the last one started at least %(gap)s seconds
-- ago. Concurrent replicas queue on the row lock and re-read the row, so one of them gets it. No
-- session state is involved, so this works through a transaction pooler. No row back means "not now".
-- One lease per cluster (migration 0009): each cluster's replicas reconcile their own pods.
UPDATE pod_sweeper.reconcile_state
SET last_started_at = now(), last_replica = %(replica)s, last_error = NULL
WHERE cluster = %(cluster)s AND (last_started_at IS NULL
   OR (last_started_at <= now() - make_interval(secs => %(gap)s)
       AND (last_finished_at >= last_started_at OR last_started_at <= now() - make_interval(secs => %(lease)s))))
RETURNING now() AS started_at
