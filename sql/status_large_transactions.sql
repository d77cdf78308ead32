-- The large host transactions the breaker's transaction rule holds now (migration 0020), for `status`,
-- `release-transaction`'s preview and the metrics refresher: each one's key (the transaction's start,
-- its rows' enqueued_at), its size when found, its rows still open, the rule's reason, and who found it
-- when. Not ended ones only: the partial index. Each one's open rows through the claim index (the
-- cluster's open rows, filtered by the key).
SELECT t.id, t.cluster, t.enqueued_at, t.rows_found, t.reason, t.found_at, t.found_by,
       (SELECT count(*)
        FROM pod_sweeper.outbox AS o
        WHERE o.cluster = t.cluster AND o.status IN ('pending', 'claimed') AND o.enqueued_at = t.enqueued_at)
           AS open_rows
FROM pod_sweeper.large_transactions AS t
WHERE t.ended_at IS NULL
ORDER BY t.found_at, t.id
