-- The retention pass's share of the audit trail: rows older than POD_SWEEPER_AUDIT_RETENTION, through
-- the definer function of migration 0011 (the runtime role may not delete audit rows itself; the
-- function never deletes a row younger than 30 days).
SELECT pod_sweeper.prune_audit(%(keep)s::interval) AS deleted
