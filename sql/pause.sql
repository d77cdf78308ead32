-- `pod-sweeper pause`: pause a scope of %(cluster)s (%(namespace)s '': the whole cluster) until
-- %(until)s; a pause already there is replaced (its reason, actor and end), keeping its start.
INSERT INTO pod_sweeper.pauses (cluster, pod_namespace, reason, actor, until)
VALUES (%(cluster)s, %(namespace)s, %(reason)s, %(actor)s, %(until)s)
ON CONFLICT (cluster, pod_namespace) DO UPDATE
SET reason = excluded.reason, actor = excluded.actor, db_role = excluded.db_role, until = excluded.until,
    since = CASE WHEN pauses.until > now() THEN pauses.since ELSE now() END
RETURNING since, until
