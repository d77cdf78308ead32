-- Retires that enqueued nothing, newest first: the host row named no pod the outbox can hold (a NULL
-- or empty namespace, name, sandbox id or generation, or a UID that is not a UID). Find the host row by
-- its sandbox_id and generation, fix it, then DELETE FROM pod_sweeper.rejects WHERE id = ...
SELECT id, attachment_id, reason, sandbox_id, generation, pod_namespace, pod_name, pod_uid, problem, rejected_at
FROM pod_sweeper.rejects
ORDER BY id DESC
LIMIT 100;
