-- `pod-sweeper check`: the namespaces %(cluster)s's rows name, whose permissions to check on its API
-- server: those of its open rows (the claim index, which the cluster leads), of its dead rows (theirs)
-- and of its rows done in the last hour (the done_at index). Bounded by the open and dead rows and an
-- hour's sweep, never the done history.
SELECT pod_namespace FROM (
    SELECT pod_namespace FROM pod_sweeper.outbox
    WHERE cluster = %(cluster)s AND status IN ('pending', 'claimed')
    UNION
    SELECT pod_namespace FROM pod_sweeper.outbox WHERE status = 'dead' AND cluster = %(cluster)s
    UNION
    SELECT pod_namespace FROM pod_sweeper.outbox
    WHERE status = 'done' AND done_at > now() - interval '1 hour' AND cluster = %(cluster)s
) AS n
ORDER BY 1
LIMIT 50
