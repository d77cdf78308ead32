-- Rows by status and outcome, for `pod-sweeper status` (the summary view, migration 0016): the open and
-- dead rows all of them, the done rows of the last hour by outcome, and every done row's count as the
-- planner estimates it (outcome NULL, estimated). Never a read of the done history.
SELECT status, outcome, rows, oldest_enqueued_at, last_updated_at, counted_since, estimated
FROM pod_sweeper.summary
ORDER BY array_position(ARRAY['pending', 'claimed', 'dead', 'done'], status), outcome NULLS FIRST
