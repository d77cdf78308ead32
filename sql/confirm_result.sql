-- Record what the confirmation GETs of %(cluster)s's API server saw: gone (confirmed) or still
-- terminating past the limit (stuck).
UPDATE pod_sweeper.outbox AS o
SET confirmed_at = CASE WHEN f.gone THEN now() END,
    confirm_after = CASE WHEN f.gone THEN NULL ELSE o.confirm_after END,
    stuck_at = CASE WHEN f.stuck THEN coalesce(o.stuck_at, now()) ELSE o.stuck_at END
FROM unnest(%(ids)s::bigint[], %(gone)s::boolean[], %(stuck)s::boolean[]) AS f(id, gone, stuck)
WHERE o.id = f.id AND o.cluster = %(cluster)s AND o.status = 'done' AND o.outcome = 'deleted'
