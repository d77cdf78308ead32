-- Rows not finished yet (pending, in backoff, or claimed), oldest first.
SELECT id, status, sandbox_id, generation, pod_namespace, pod_name, attempts, claimed_by,
       next_attempt_at, lease_expires_at, last_error, enqueued_at
FROM pod_sweeper.outbox
WHERE status IN ('pending', 'claimed')
ORDER BY next_attempt_at
LIMIT 100;
