-- A replica's heartbeat (tasks/loops/presence.py): its one row in pod_sweeper.replicas, written whole
-- (its settings, its readiness and the reasons it sees rows wait, as of now), and the rows of replicas
-- an hour past their last heartbeat (or their clean stop) deleted, so the table holds one row per
-- replica that ran in the last hour. One statement, one transaction a heartbeat: none of the columns it
-- changes is indexed, so the update is HOT (migration 0019).
WITH gone AS (
    DELETE FROM pod_sweeper.replicas
    WHERE coalesce(stopped_at, seen_at) < now() - make_interval(secs => %(forget_after)s)
      AND replica <> %(replica)s
)
INSERT INTO pod_sweeper.replicas AS r
    (replica, host, release, schema_version, cluster, namespaces, dry_run, dry_run_namespaces, guard,
     rate_limit, concurrency, ready, waits, heartbeat_seconds, started_at, seen_at, stopped_at)
VALUES
    (%(replica)s, %(host)s, %(release)s, %(schema_version)s, %(cluster)s, %(namespaces)s, %(dry_run)s,
     %(dry_run_namespaces)s, %(guard)s, %(rate_limit)s, %(concurrency)s, %(ready)s, %(waits)s::jsonb,
     %(heartbeat_seconds)s, now() - make_interval(secs => %(up_for)s), now(), NULL)
ON CONFLICT (replica) DO UPDATE
    SET host = EXCLUDED.host, release = EXCLUDED.release, schema_version = EXCLUDED.schema_version,
        cluster = EXCLUDED.cluster, namespaces = EXCLUDED.namespaces, dry_run = EXCLUDED.dry_run,
        dry_run_namespaces = EXCLUDED.dry_run_namespaces, guard = EXCLUDED.guard,
        rate_limit = EXCLUDED.rate_limit, concurrency = EXCLUDED.concurrency, ready = EXCLUDED.ready,
        waits = EXCLUDED.waits, heartbeat_seconds = EXCLUDED.heartbeat_seconds,
        started_at = EXCLUDED.started_at, seen_at = now(), stopped_at = NULL
