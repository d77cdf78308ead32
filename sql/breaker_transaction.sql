-- The breaker's transaction rule, in the claim's transaction (store/sweep/outbox.py): for each enqueue time
-- in %(keys)s (a host transaction's start, which its rows share), how many of its rows of %(cluster)s
-- are still pending, counting no further than %(limit)s. A pending row that was never handed back is due
-- at its enqueue time, so each key is one equality on the claim index: the cost is the transaction's
-- rows, never the open rows' or the history's. The rows the claim just took are claimed by now: the
-- caller adds its own share. A transaction that began before the cluster's last reset-breaker is not
-- judged again: the reset let its rows go (no row comes back for it); nor one found already
-- (pod_sweeper.large_transactions, migration 0020): a released one's rows go, a kept-back one's are not
-- claimed.
SELECT k.at,
       (SELECT count(*)
        FROM (SELECT 1
              FROM pod_sweeper.outbox AS o
              WHERE o.cluster = %(cluster)s AND o.status IN ('pending', 'claimed')
                AND o.next_attempt_at = k.at AND o.enqueued_at = k.at
                AND o.status = 'pending' AND o.reason IN ('retired', 'row_deleted')
              LIMIT %(limit)s) AS s) AS pending
FROM unnest(%(keys)s::timestamptz[]) AS k(at)
WHERE k.at > coalesce((SELECT resumed_at FROM pod_sweeper.breaker WHERE cluster = %(cluster)s), '-infinity')
  AND NOT EXISTS (SELECT 1 FROM pod_sweeper.large_transactions AS t
                  WHERE t.cluster = %(cluster)s AND t.enqueued_at = k.at)
