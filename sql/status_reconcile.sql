-- The reconciliation pass's last run per cluster and each cluster's quarantine, for `pod-sweeper status`.
SELECT r.cluster, r.last_started_at, r.last_finished_at, r.last_replica, r.last_pods_seen, r.last_enqueued,
       r.last_error,
       (SELECT count(*) FROM pod_sweeper.suspects AS s WHERE s.cluster = r.cluster) AS suspects,
       (SELECT min(first_seen_at) FROM pod_sweeper.suspects AS s WHERE s.cluster = r.cluster) AS oldest_suspect_since
FROM pod_sweeper.reconcile_state AS r
ORDER BY r.cluster
