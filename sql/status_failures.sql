-- The latest failures: open or dead rows with an error, newest first.
SELECT id, status, cluster, pod_namespace, pod_name, attempts, last_http_status, left(last_error, 120) AS last_error,
       updated_at
FROM pod_sweeper.outbox
WHERE status IN ('pending', 'claimed', 'dead') AND last_error IS NOT NULL
ORDER BY updated_at DESC
LIMIT 10
