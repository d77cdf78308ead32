-- After a complete listing: suspects this pass did not see are gone (or lost their labels).
DELETE FROM pod_sweeper.suspects WHERE cluster = %(cluster)s AND last_seen_at < %(started_at)s
