-- This replica cannot reach its cluster's API server (its outage gate closed, or a probe failed again):
-- record it, keeping the first report's `since`; probed_at says the report is current.
INSERT INTO pod_sweeper.outages (cluster, replica, since, reason, probed_at)
VALUES (%(cluster)s, %(replica)s, now() - make_interval(secs => %(closed_for)s), %(reason)s, now())
ON CONFLICT (cluster, replica) DO UPDATE SET reason = EXCLUDED.reason, probed_at = now()
