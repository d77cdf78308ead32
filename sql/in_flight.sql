-- Rows of a scope a replica holds right now (claimed, lease not yet over): a pause stops new claims,
-- and these may still be sent until their leases end. %(namespace)s '': the whole cluster.
SELECT count(*) AS n, max(next_attempt_at) AS last_lease_ends
FROM pod_sweeper.outbox
WHERE status = 'claimed' AND cluster = %(cluster)s AND next_attempt_at > now()
  AND (%(namespace)s::text = '' OR pod_namespace = %(namespace)s::text)
  AND (%(name)s::text IS NULL OR pod_name = %(name)s)
