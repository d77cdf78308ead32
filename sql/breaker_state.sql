-- Whether one cluster's breaker is tripped, and why: what the claim reads when the per-minute ceiling
-- is off (POD_SWEEPER_MAX_DELETES_PER_MINUTE=0), one row by its primary key, no lock and no count (the
-- surge watch trips it; tasks/loops/surge.py). No row: the cluster has no breaker row yet, not tripped.
SELECT CASE WHEN tripped_at IS NOT NULL THEN coalesce(reason, 'tripped') END AS tripped_reason
FROM pod_sweeper.breaker
WHERE cluster = %(cluster)s
