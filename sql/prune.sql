-- One retention batch: the oldest done rows finished before the retention window, at most %(batch)s.
-- Small batches keep each transaction short and the lock footprint small on a busy table.
DELETE FROM pod_sweeper.outbox
WHERE id IN (
    SELECT id FROM pod_sweeper.outbox
    WHERE status = 'done' AND done_at < now() - %(retention)s::interval
    ORDER BY done_at
    LIMIT %(batch)s
)
