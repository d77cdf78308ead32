-- Retention: the large transactions an on-call ended longer ago than the done rows are kept
-- (%(keep_seconds)s, POD_SWEEPER_RETENTION); the audit trail keeps who ended each and how.
DELETE FROM pod_sweeper.large_transactions WHERE ended_at < now() - make_interval(secs => %(keep_seconds)s)
