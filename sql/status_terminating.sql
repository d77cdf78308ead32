-- Pods deleted but still terminating past POD_SWEEPER_STUCK_TERMINATING_SECONDS, in every cluster (each
-- row's own replica looks at it; the cluster says which). A stuck pod is still watched (confirm_after
-- set until it is seen gone), so the confirmation index serves this: the rows awaiting a look, never
-- the done history.
SELECT id, cluster, pod_namespace, pod_name, pod_uid, done_at, stuck_at
FROM pod_sweeper.outbox
WHERE confirm_after IS NOT NULL AND confirmed_at IS NULL
  AND stuck_at IS NOT NULL AND status = 'done'
ORDER BY stuck_at
LIMIT 10
