-- The pauses and holds in force (`pod-sweeper status`, `explain`, the gauges), soonest end first.
SELECT 'pause' AS kind, cluster, pod_namespace, NULL::text AS pod_name, NULL::uuid AS pod_uid, reason, actor,
       since, until, now() AS now
FROM pod_sweeper.pauses WHERE pod_sweeper.in_force(until)
UNION ALL
SELECT 'hold', cluster, pod_namespace, pod_name, pod_uid, reason, actor, since, until, now()
FROM pod_sweeper.holds WHERE pod_sweeper.in_force(until)
ORDER BY until
