-- `pod-sweeper check`: the namespaces the outbox names for %(cluster)s, whose permissions to check on
-- its API server.
SELECT DISTINCT pod_namespace FROM pod_sweeper.outbox WHERE cluster = %(cluster)s ORDER BY 1 LIMIT 50
