-- `pod-sweeper explain`: every pause and hold in force, and the large transaction not released, that
-- keep one outbox row back, soonest end first: pod_sweeper.keeping, the rule the claim itself applies
-- (migrations 0015 and 0020).
SELECT *
FROM pod_sweeper.keeping(%(cluster)s, %(namespace)s, %(name)s, %(uid)s::uuid, %(enqueued_at)s::timestamptz)
ORDER BY until
