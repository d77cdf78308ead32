-- The latest rejects: retires that named no pod the outbox can hold, newest first (the values as the
-- host row carried them, for finding it).
SELECT id, attachment_id, cluster, sandbox_id, generation, pod_namespace, pod_name, pod_uid, problem, rejected_at
FROM pod_sweeper.rejects
ORDER BY id DESC
LIMIT 10
