-- Take up to %(batch)s deleted rows whose grace period has passed and whose pod is not yet seen gone.
-- Moving confirm_after forward is the claim: another replica skips them until then.
UPDATE pod_sweeper.outbox AS o
SET confirm_after = now() + make_interval(secs => %(recheck_seconds)s)
WHERE o.id IN (
    SELECT id FROM pod_sweeper.outbox
    WHERE confirm_after <= now() AND confirmed_at IS NULL AND status = 'done' AND outcome = 'deleted'
    ORDER BY confirm_after
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
RETURNING o.id, o.pod_namespace, o.pod_name, o.pod_uid, o.done_at, o.stuck_at
