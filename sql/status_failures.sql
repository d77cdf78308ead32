-- The latest failures: open or dead rows with an error, newest first. The open rows through the claim
-- index, the dead through theirs (a condition on both at once would be a scan of the whole outbox).
SELECT * FROM (
    (SELECT id, status, cluster, pod_namespace, pod_name, attempts, last_http_status,
            left(last_error, 120) AS last_error, updated_at
     FROM pod_sweeper.outbox
     WHERE status IN ('pending', 'claimed') AND last_error IS NOT NULL
     ORDER BY updated_at DESC
     LIMIT 10)
    UNION ALL
    (SELECT id, status, cluster, pod_namespace, pod_name, attempts, last_http_status,
            left(last_error, 120) AS last_error, updated_at
     FROM pod_sweeper.outbox
     WHERE status = 'dead' AND last_error IS NOT NULL
     ORDER BY updated_at DESC
     LIMIT 10)
) AS f
ORDER BY updated_at DESC
LIMIT 10
