-- `pod-sweeper check`: the namespaces the outbox names, whose permissions to check.
SELECT DISTINCT pod_namespace FROM pod_sweeper.outbox ORDER BY 1 LIMIT 50
