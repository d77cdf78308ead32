-- The reconciliation pass's last run and its quarantine, for `pod-sweeper status`.
SELECT r.last_started_at, r.last_finished_at, r.last_replica, r.last_pods_seen, r.last_enqueued, r.last_error,
       (SELECT count(*) FROM pod_sweeper.suspects) AS suspects,
       (SELECT min(first_seen_at) FROM pod_sweeper.suspects) AS oldest_suspect_since
FROM pod_sweeper.reconcile_state AS r
