-- The one-row lag view, as `pod-sweeper status` and the metrics refresher read it.
SELECT pending, claimable, backoff, claimed, dead,
       oldest_claimable_seconds, oldest_backoff_seconds, oldest_claim_seconds, rejected
FROM pod_sweeper.lag
