-- Who sweeps: every replica that ran in the last hour, as its heartbeat last wrote it (at least every 30 s; the
-- table pod_sweeper.replicas, migration 0019), live ones first. state: live, stale (three heartbeats
-- missed: it died, froze or lost the database) or stopped (a clean stop). guard and dry_run are the
-- settings that decide a row's fate; waits are the reasons it sees rows wait now (docs/operations.md,
-- "Why a row waits"). A cluster with open rows and none live is what `pod-sweeper sql alerts` calls
-- PodSweeperNoLiveReplica.
SELECT r.cluster, r.replica, pod_sweeper.replica_state(r) AS state, r.ready, r.host, r.release,
       r.schema_version, r.namespaces, r.dry_run, r.dry_run_namespaces, r.guard, r.rate_limit, r.concurrency,
       r.waits, r.started_at, r.seen_at, round(extract(epoch FROM now() - r.seen_at)) AS seen_seconds_ago
FROM pod_sweeper.replicas AS r
ORDER BY pod_sweeper.replica_state(r) = 'live' DESC, r.cluster, r.replica;
