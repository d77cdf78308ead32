-- `pod-sweeper explain`: every recorded attempt of the given outbox rows, oldest first.
SELECT outbox_id, claim_epoch, replica, started_at, duration_ms, http_status, reason, result, error, recorded
FROM pod_sweeper.attempts
WHERE outbox_id = ANY(%(ids)s::bigint[])
ORDER BY outbox_id, id
