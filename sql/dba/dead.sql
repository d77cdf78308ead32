-- Rows pod-sweeper gave up on, newest first, with the last answer it got.
-- Reopen them with `pod-sweeper retry --dead` once the cause is fixed.
SELECT id, sandbox_id, generation, pod_namespace, pod_name, pod_uid, attempts,
       last_http_status, last_error, updated_at
FROM pod_sweeper.outbox
WHERE status = 'dead'
ORDER BY updated_at DESC
LIMIT 100;
