-- `pod-sweeper release`: end a pod's hold; returns it if it was still in force.
DELETE FROM pod_sweeper.holds
WHERE cluster = %(cluster)s AND pod_namespace = %(namespace)s AND pod_name = %(name)s
RETURNING since, until, pod_sweeper.in_force(until) AS was_active
