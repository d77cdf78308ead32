-- The on-call alerts, for teams that alert from Postgres: one row per condition that holds now
-- (no rows: all clear). The same conditions as deploy/prometheusrule.yaml; thresholds in seconds.
SELECT 'lag_high' AS alert, format('oldest claimable row waited %s s', round(oldest_claimable_seconds)) AS detail
FROM pod_sweeper.lag WHERE oldest_claimable_seconds > 300
UNION ALL
SELECT 'dead_rows', format('%s dead rows; see `pod-sweeper sql dead`', dead)
FROM pod_sweeper.lag WHERE dead > 0
UNION ALL
SELECT 'stuck_claim', format('a claim has been held %s s; its replica may be frozen', round(oldest_claim_seconds))
FROM pod_sweeper.lag WHERE oldest_claim_seconds > 600
UNION ALL
SELECT 'no_progress', 'rows are claimable but none finished in 10 minutes'
FROM pod_sweeper.lag
WHERE oldest_claimable_seconds > 60
  AND coalesce((SELECT max(done_at) FROM pod_sweeper.outbox WHERE status = 'done'), '-infinity') < now() - interval '10 minutes';
