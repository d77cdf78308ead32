-- Every cluster's blast-radius breaker, for `pod-sweeper status` and `explain`.
SELECT cluster, tripped_at, reason, tripped_by, resumed_at, resumed_by FROM pod_sweeper.breaker ORDER BY cluster
