-- The cluster's confirmed suspects become outbox rows (reason 'reconciled', the UID the pass observed) through the
-- same enqueue function the triggers call, so the same rule applies: a UID whose row is open or
-- finished is left to that row, one that ended skipped_active is reopened. Returns how many rows
-- were new or reopened.
-- A held pod (migration 0011) is never enqueued: its suspect stays quarantined, and a pass after the
-- hold ends confirms it again.
WITH confirmed AS (
    DELETE FROM pod_sweeper.suspects AS s
    WHERE s.cluster = %(cluster)s AND s.pod_uid = ANY(%(uids)s::uuid[])
      AND NOT EXISTS (
          SELECT 1 FROM pod_sweeper.holds AS h
          WHERE h.cluster = s.cluster AND h.pod_namespace = s.pod_namespace AND h.pod_name = s.pod_name
            AND h.until > now() AND (h.pod_uid IS NULL OR h.pod_uid = s.pod_uid)
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
