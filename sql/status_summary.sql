-- Rows by status and outcome, for `pod-sweeper status`.
SELECT status, outcome, rows, oldest_enqueued_at, last_updated_at
FROM pod_sweeper.summary
ORDER BY array_position(ARRAY['pending', 'claimed', 'dead', 'done'], status), outcome NULLS FIRST
