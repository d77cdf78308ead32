-- `pod-sweeper explain`: the reconciliation pass's suspects matching one pod or sandbox.
SELECT pod_uid::text AS pod_uid, pod_namespace, pod_name, sandbox_id, generation, attachment_id, why,
       first_seen_at, last_seen_at
FROM pod_sweeper.suspects
WHERE pod_uid = %(uid)s::uuid
   OR (pod_name = %(name)s AND pod_namespace = coalesce(%(namespace)s, pod_namespace))
   OR sandbox_id = %(sandbox)s
