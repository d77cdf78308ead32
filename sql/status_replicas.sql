-- The replicas of every cluster, as their heartbeats last wrote them (migration 0019), for `status`,
-- `explain` and the metrics refresher: each one's settings, readiness and waits, and its state by the
-- one rule of pod_sweeper.replica_state (live, stale after three missed heartbeats, stopped). One row a
-- replica that ran in the last hour: the table never grows with time.
SELECT r.replica, r.host, r.release, r.schema_version, r.cluster, r.namespaces, r.dry_run,
       r.dry_run_namespaces, r.guard, r.rate_limit, r.concurrency, r.ready, r.waits, r.heartbeat_seconds,
       r.started_at, r.seen_at, r.stopped_at, pod_sweeper.replica_state(r) AS state,
       extract(epoch FROM now() - r.seen_at)::float8 AS seen_seconds_ago
FROM pod_sweeper.replicas AS r
ORDER BY r.cluster, r.replica
