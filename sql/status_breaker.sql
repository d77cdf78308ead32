-- The blast-radius breaker's row, for `pod-sweeper status`.
SELECT tripped_at, reason, tripped_by, resumed_at, resumed_by FROM pod_sweeper.breaker
