-- `pod-sweeper explain`: the outbox rows of one pod (by UID, or namespace and name, or a bare name) or
-- of one sandbox, newest first. Unset parameters are NULL. Every part is an index path, so the answer
-- costs the open rows and the rows found, never the done history (migration 0016): a UID through its
-- unique index; a name or sandbox among the open rows through the claim index, among the dead through
-- theirs, among the done through outbox_done_pod and outbox_done_sandbox. A bare name (no namespace)
-- is looked up in each namespace the done rows have, found one index probe at a time (a loose scan:
-- a handful of namespaces, however many rows).
WITH RECURSIVE namespaces AS (
    SELECT min(pod_namespace) AS ns
    FROM pod_sweeper.outbox
    WHERE status = 'done' AND %(name)s::text IS NOT NULL AND %(namespace)s::text IS NULL
    UNION ALL
    SELECT (SELECT min(o.pod_namespace) FROM pod_sweeper.outbox AS o
            WHERE o.status = 'done' AND o.pod_namespace > n.ns)
    FROM namespaces AS n
    WHERE n.ns IS NOT NULL
), found AS (
    SELECT id FROM pod_sweeper.outbox WHERE pod_uid = %(uid)s::uuid
    UNION
    SELECT id FROM pod_sweeper.outbox
    WHERE status IN ('pending', 'claimed')
      AND ((pod_name = %(name)s::text AND pod_namespace = coalesce(%(namespace)s::text, pod_namespace))
           OR sandbox_id = %(sandbox)s::text)
    UNION
    SELECT id FROM pod_sweeper.outbox
    WHERE status = 'dead'
      AND ((pod_name = %(name)s::text AND pod_namespace = coalesce(%(namespace)s::text, pod_namespace))
           OR sandbox_id = %(sandbox)s::text)
    UNION
    SELECT id FROM pod_sweeper.outbox
    WHERE status = 'done' AND pod_namespace = %(namespace)s::text AND pod_name = %(name)s::text
    UNION
    SELECT o.id FROM namespaces AS n
    JOIN pod_sweeper.outbox AS o ON o.status = 'done' AND o.pod_namespace = n.ns AND o.pod_name = %(name)s::text
    UNION
    SELECT id FROM pod_sweeper.outbox WHERE status = 'done' AND sandbox_id = %(sandbox)s::text
)
SELECT id, attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid::text AS pod_uid, reason, status,
       outcome, attempts, claim_epoch, claimed_by, claimed_at, next_attempt_at, lease_expires_at, last_error,
       last_http_status, enqueued_at, updated_at, done_at, confirm_after, confirmed_at, stuck_at, cluster,
       now() AS now
FROM pod_sweeper.outbox
WHERE id IN (SELECT id FROM found)
ORDER BY id DESC
LIMIT 20
