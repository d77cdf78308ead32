-- One retention batch: the oldest done rows finished before the retention window, at most %(batch)s.
-- Small batches keep each transaction short and the lock footprint small on a busy table.
-- would_delete rows (a dry run's) are kept: the next real run must still act on them.
DELETE FROM pod_sweeper.outbox
WHERE id IN (
    SELECT id FROM pod_sweeper.outbox
    WHERE status = 'done' AND outcome <> 'would_delete' AND done_at < now() - %(retention)s::interval
    ORDER BY done_at
    LIMIT %(batch)s
)
