-- Each cluster's open rows (the lag_by_cluster view): what waits where, and when a replica last claimed
-- there. Rows that stay claimable with no recent claim mean that cluster's sweeper is missing or down.
SELECT cluster, pending, claimable, backoff, claimed, oldest_claimable_seconds, last_claimed_at
FROM pod_sweeper.lag_by_cluster
ORDER BY cluster
