-- `pod-sweeper unpause`: end a scope's pause; returns it if it was still in force.
DELETE FROM pod_sweeper.pauses
WHERE cluster = %(cluster)s AND pod_namespace = %(namespace)s
RETURNING since, until, pod_sweeper.in_force(until) AS was_active
