-- The wakeup flag's row (migration 0007), for `pod-sweeper status`: armed means retires NOTIFY.
SELECT armed, changed_at, changed_by FROM pod_sweeper.wakeup
