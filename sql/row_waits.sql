-- Why each open row waits: one reason per row, by the precedence core/waits.py states (ROW_ORDER),
-- read by `explain` (a row's reason), `status` and the metrics refresher (the rows each reason keeps,
-- per cluster: store/reads/waits.py:by_cluster wraps this statement). 'due' is a row nothing keeps: the next
-- claim takes it. Rows of %(cluster)s (NULL: every cluster), of %(ids)s (NULL: every open row).
-- The rules are the claim's own (sql/claim.sql): a claim whose lease has not ended; a pause or a hold
-- (pod_sweeper.keeping, migration 0015); a tripped breaker; the replication guard (%(guard)s: the
-- standbys the reader's settings name, NULL: off; a row whose mark does not vouch for its enqueue, or
-- that a named standby has not flushed, or while one is not connected); a replica's report that the
-- API server is unreachable, renewed in the last 2 minutes (pod_sweeper.outages); a backoff after a
-- 401, a 403 or another failure; and a row claimable for over %(unswept_after)s seconds that nothing
-- else keeps, which no replica of its cluster has claimed. O(open rows): the claim index.
WITH standbys AS (
    SELECT CASE WHEN count(DISTINCT application_name) = cardinality(%(guard)s::text[]) THEN min(flush_lsn) END AS flushed
    FROM pg_stat_replication
    WHERE %(guard)s::text[] IS NOT NULL AND application_name = ANY(%(guard)s::text[])
)
SELECT o.id, o.cluster, o.pod_namespace, o.pod_name,
       CASE
           WHEN o.status = 'claimed' AND o.next_attempt_at > now() THEN 'claimed'
           WHEN EXISTS (SELECT 1 FROM pod_sweeper.keeping(o.cluster, o.pod_namespace, o.pod_name, o.pod_uid) AS k
                        WHERE k.kind = 'hold') THEN 'held'
           WHEN EXISTS (SELECT 1 FROM pod_sweeper.keeping(o.cluster, o.pod_namespace, o.pod_name, o.pod_uid) AS k
                        WHERE k.kind = 'pause') THEN 'paused'
           WHEN EXISTS (SELECT 1 FROM pod_sweeper.breaker AS b
                        WHERE b.cluster = o.cluster AND b.tripped_at IS NOT NULL) THEN 'breaker'
           WHEN %(guard)s::text[] IS NOT NULL
                AND NOT coalesce(o.guard_enqueued_at = o.enqueued_at
                                 AND o.guard_lsn <= (SELECT flushed FROM standbys), false) THEN 'replication_guard'
           WHEN EXISTS (SELECT 1 FROM pod_sweeper.outages AS u
                        WHERE u.cluster = o.cluster AND u.probed_at > now() - interval '2 minutes') THEN 'kube_unreachable'
           WHEN o.next_attempt_at > now() AND o.last_http_status = 401 THEN 'kube_unauthorized'
           WHEN o.next_attempt_at > now() AND o.last_http_status = 403 THEN 'namespace_refused'
           WHEN o.next_attempt_at > now() THEN 'backoff'
           WHEN o.next_attempt_at <= now() - make_interval(secs => %(unswept_after)s) THEN 'unswept'
           ELSE 'due'
       END AS reason,
       extract(epoch FROM now() - o.enqueued_at)::float8 AS waited_seconds
FROM pod_sweeper.outbox AS o
WHERE o.status IN ('pending', 'claimed')
  AND (%(cluster)s::text IS NULL OR o.cluster = %(cluster)s::text)
  AND (%(ids)s::bigint[] IS NULL OR o.id = ANY(%(ids)s::bigint[]))
