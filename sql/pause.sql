-- `pod-sweeper pause`: pause a scope of %(cluster)s (%(namespace)s '': the whole cluster) until
-- %(until)s, or for %(seconds)s from the database's clock (never the caller's); a pause already there
-- is replaced (its reason, actor and end), keeping its start. An end that has passed writes nothing and
-- returns no row.
INSERT INTO pod_sweeper.pauses (cluster, pod_namespace, reason, actor, until)
SELECT %(cluster)s, %(namespace)s, %(reason)s, %(actor)s, e.until
FROM (SELECT coalesce(%(until)s::timestamptz, now() + make_interval(secs => %(seconds)s::float8)) AS until) AS e
WHERE pod_sweeper.in_force(e.until)
ON CONFLICT (cluster, pod_namespace) DO UPDATE
SET reason = excluded.reason, actor = excluded.actor, db_role = excluded.db_role, until = excluded.until,
    since = CASE WHEN pod_sweeper.in_force(pauses.until) THEN pauses.since ELSE now() END
RETURNING since, until
