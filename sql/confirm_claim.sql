-- Take up to %(batch)s of %(cluster)s's deleted rows whose grace period has passed and whose pod is not
-- yet seen gone. Moving confirm_after forward is the claim: another replica skips them until then.
-- Only the replica's own cluster: another cluster's pod is looked up on another API server, and a 404
-- here would say nothing of it.
-- age_seconds is how long ago the row's DELETE was recorded, on the database's clock (the one done_at
-- was written by): whether a pod is stuck is judged by it, never by a replica's wall clock, which may
-- run ahead of the database's or jump (a replica ahead would call a pod stuck early, and force it).
UPDATE pod_sweeper.outbox AS o
SET confirm_after = now() + make_interval(secs => %(recheck_seconds)s)
WHERE o.id IN (
    SELECT id FROM pod_sweeper.outbox
    WHERE cluster = %(cluster)s
      AND confirm_after <= now() AND confirmed_at IS NULL AND status = 'done' AND outcome = 'deleted'
      -- every writer of a done row sets done_at; a row an operator's hand left without one has no age to
      -- judge, and would stop the confirmer
      AND done_at IS NOT NULL
    ORDER BY confirm_after
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
RETURNING o.id, o.pod_namespace, o.pod_name, o.pod_uid, o.done_at, o.stuck_at,
    extract(epoch FROM now() - o.done_at)::float8 AS age_seconds
