-- A preview of what `pod-sweeper release-transaction ID` lets go (or `discard-transaction` ends): the
-- large transaction's open rows, %(limit)s of them, by pod. Through the claim index.
SELECT o.id, o.cluster, o.pod_namespace, o.pod_name, o.pod_uid, o.sandbox_id, o.generation, o.status
FROM pod_sweeper.large_transactions AS t
JOIN pod_sweeper.outbox AS o
  ON o.cluster = t.cluster AND o.status IN ('pending', 'claimed') AND o.enqueued_at = t.enqueued_at
WHERE t.id = %(id)s
ORDER BY o.pod_namespace, o.pod_name
LIMIT %(limit)s
