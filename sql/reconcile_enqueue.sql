-- The cluster's confirmed suspects become outbox rows (reason 'reconciled', the UID the pass observed) through the
-- same enqueue function the triggers call, so the same rule applies: a UID whose row is open or
-- finished is left to that row, one that ended skipped_active is reopened. Returns how many rows
-- were new or reopened.
-- A held pod (pod_sweeper.keeping, migration 0015) is never enqueued: its suspect stays quarantined, and a pass after the
-- hold ends confirms it again.
WITH confirmed AS (
    DELETE FROM pod_sweeper.suspects AS s
    WHERE s.cluster = %(cluster)s AND s.pod_uid = ANY(%(uids)s::uuid[])
      AND NOT EXISTS (
          SELECT 1 FROM pod_sweeper.keeping(s.cluster, s.pod_namespace, s.pod_name, s.pod_uid) AS k
          WHERE k.kind = 'hold'  -- a pause only delays the claim: its suspects still become rows
      )
    RETURNING *
), fresh AS (
    SELECT c.* FROM confirmed AS c
    WHERE NOT EXISTS (
        SELECT 1 FROM pod_sweeper.outbox AS o
        WHERE o.pod_uid = c.pod_uid AND NOT (o.status = 'done' AND o.outcome = 'skipped_active')
    )
)
SELECT count(*) FILTER (WHERE f.pod_uid IS NOT NULL) AS enqueued
FROM confirmed AS c
LEFT JOIN fresh AS f USING (pod_uid)
CROSS JOIN LATERAL pod_sweeper.enqueue(
    c.attachment_id, c.sandbox_id, c.generation, c.pod_namespace, c.pod_name, c.pod_uid, 'reconciled', c.cluster
) AS e
