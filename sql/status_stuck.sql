-- Claims whose lease has expired: their replica crashed, froze or lost its network. Any replica will
-- take them over; rows that stay here mean no replica is running.
SELECT id, cluster, claimed_by, claimed_at, lease_expires_at, attempts, pod_namespace, pod_name
FROM pod_sweeper.outbox
WHERE status = 'claimed' AND next_attempt_at < now()
ORDER BY next_attempt_at
LIMIT 10
