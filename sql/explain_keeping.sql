-- `pod-sweeper explain`: every pause and hold in force that keeps one outbox row back, soonest end
-- first: pod_sweeper.keeping, the rule the claim itself applies (migration 0015).
SELECT * FROM pod_sweeper.keeping(%(cluster)s, %(namespace)s, %(name)s, %(uid)s::uuid) ORDER BY until
