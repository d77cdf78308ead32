-- `pod-sweeper hold`: keep one pod's rows from being sent until %(until)s (%(uid)s NULL: whichever
-- pod holds the name); a hold already there is replaced.
INSERT INTO pod_sweeper.holds (cluster, pod_namespace, pod_name, pod_uid, reason, actor, until)
VALUES (%(cluster)s, %(namespace)s, %(name)s, %(uid)s, %(reason)s, %(actor)s, %(until)s)
ON CONFLICT (cluster, pod_namespace, pod_name) DO UPDATE
SET pod_uid = excluded.pod_uid, reason = excluded.reason, actor = excluded.actor, db_role = excluded.db_role,
    until = excluded.until, since = CASE WHEN holds.until > now() THEN holds.since ELSE now() END
RETURNING since, until
