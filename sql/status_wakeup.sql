-- The wakeup flag's rows (migration 0007; one per cluster since 0009), for `pod-sweeper status`:
-- armed means that cluster's retires NOTIFY.
SELECT cluster, armed, changed_at, changed_by FROM pod_sweeper.wakeup ORDER BY cluster
