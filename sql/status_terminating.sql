-- Pods deleted but still terminating past POD_SWEEPER_STUCK_TERMINATING_SECONDS, in every cluster (each
-- row's own replica looks at it; the cluster says which).
SELECT id, cluster, pod_namespace, pod_name, pod_uid, done_at, stuck_at
FROM pod_sweeper.outbox
WHERE stuck_at IS NOT NULL AND confirmed_at IS NULL AND status = 'done'
ORDER BY stuck_at
LIMIT 10
