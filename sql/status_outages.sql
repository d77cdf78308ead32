-- The API outages replicas report now, for `pod-sweeper status`: current reports only (a replica that
-- died mid-outage stops probing; its row is left out after two minutes and pruned after an hour).
SELECT cluster, replica, since, reason, probed_at
FROM pod_sweeper.outages
WHERE probed_at > now() - interval '2 minutes'
ORDER BY cluster, since
