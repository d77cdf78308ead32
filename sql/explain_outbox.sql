-- `pod-sweeper explain`: the outbox rows of one pod (by UID, or namespace and name) or of one sandbox.
-- A UID is an index lookup; a name or a sandbox id reads the whole outbox (an on-call question, asked
-- rarely). Unset parameters are NULL.
SELECT id, attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid::text AS pod_uid, reason, status,
       outcome, attempts, claim_epoch, claimed_by, claimed_at, next_attempt_at, lease_expires_at, last_error,
       last_http_status, enqueued_at, updated_at, done_at, confirm_after, confirmed_at, stuck_at, cluster,
       now() AS now
FROM pod_sweeper.outbox
WHERE pod_uid = %(uid)s::uuid
   OR (pod_name = %(name)s AND pod_namespace = coalesce(%(namespace)s, pod_namespace))
   OR sandbox_id = %(sandbox)s
ORDER BY id DESC
LIMIT 20
