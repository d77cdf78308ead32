-- `pod-sweeper hold`: keep one pod's rows from being sent until %(until)s, or for %(seconds)s from the
-- database's clock (%(uid)s NULL: whichever pod holds the name); a hold already there is replaced. An
-- end that has passed writes nothing and returns no row.
INSERT INTO pod_sweeper.holds (cluster, pod_namespace, pod_name, pod_uid, reason, actor, until)
SELECT %(cluster)s, %(namespace)s, %(name)s, %(uid)s::uuid, %(reason)s, %(actor)s, e.until
FROM (SELECT coalesce(%(until)s::timestamptz, now() + make_interval(secs => %(seconds)s::float8)) AS until) AS e
WHERE pod_sweeper.in_force(e.until)
ON CONFLICT (cluster, pod_namespace, pod_name) DO UPDATE
SET pod_uid = excluded.pod_uid, reason = excluded.reason, actor = excluded.actor, db_role = excluded.db_role,
    until = excluded.until, since = CASE WHEN pod_sweeper.in_force(holds.until) THEN holds.since ELSE now() END
RETURNING since, until
