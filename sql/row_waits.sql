-- Why each open row waits: one reason per row, by the precedence core/waits.py states (ROW_ORDER),
-- read by `explain` (a row's reason), `status` and the metrics refresher (the rows each reason keeps,
-- per cluster: store/reads/waits.py:by_cluster wraps this statement). 'due' is a row nothing keeps: the next
-- claim takes it. Rows of %(cluster)s (NULL: every cluster), of %(ids)s (NULL: every open row).
-- The rules are the claim's own (sql/claim.sql): a claim whose lease has not ended; a pause or a hold
-- (pod_sweeper.keeping, migration 0015); a large host transaction the breaker's transaction rule keeps
-- back (keeping's 'transaction', migration 0020); a tripped breaker; the replication guard; a replica's report
-- that the API server is unreachable, renewed in the last 2 minutes (pod_sweeper.outages); a backoff
-- after a 401, a 403 or another failure; and a row claimable for over %(unswept_after)s
-- seconds that nothing else keeps, which no replica of its cluster has claimed. O(open rows): the
-- claim index.
-- The settings that decide a row's fate (the guard's standbys) are the replicas' own, as their
-- heartbeats last wrote them in pod_sweeper.replicas (migration 0019), never the reader's: the cluster's
-- live replicas, or where none is live the last the table keeps of it (a replica that stopped still
-- says what the next one is likely to run with). The guard holds a row when any of them would: its
-- mark does not vouch for its enqueue, or a standby that replica's guard names has not flushed it, or
-- is not connected. With no replica of the cluster known at all, a row whose mark vouches for its
-- enqueue was marked by a guard whose standbys nobody can name: it is kept back too (never "the next claim
-- takes it"). (Dry run keeps no row waiting: it is claimed and done as would_delete; `explain` and
-- `status` name the replicas in dry run from the same rows, store/reads/replicas.py.)
WITH fleet AS MATERIALIZED (
    SELECT r.replica, r.cluster, r.guard
    FROM pod_sweeper.replicas AS r
    WHERE pod_sweeper.replica_state(r) = 'live'
       OR NOT EXISTS (SELECT 1 FROM pod_sweeper.replicas AS l
                      WHERE l.cluster = r.cluster AND pod_sweeper.replica_state(l) = 'live')
),
guards AS MATERIALIZED (  -- once, not per open row: each reads pg_stat_replication
    SELECT f.cluster,
           (SELECT CASE WHEN count(DISTINCT s.application_name) = cardinality(f.guard) THEN min(s.flush_lsn) END
            FROM pg_stat_replication AS s
            WHERE s.application_name = ANY(f.guard)) AS flushed
    FROM fleet AS f
    WHERE f.guard IS NOT NULL
)
SELECT o.id, o.cluster, o.pod_namespace, o.pod_name,
       CASE
           WHEN o.status = 'claimed' AND o.next_attempt_at > now() THEN 'claimed'
           WHEN EXISTS (SELECT 1 FROM pod_sweeper.keeping(o.cluster, o.pod_namespace, o.pod_name, o.pod_uid, o.enqueued_at) AS k
                        WHERE k.kind = 'hold') THEN 'held'
           WHEN EXISTS (SELECT 1 FROM pod_sweeper.keeping(o.cluster, o.pod_namespace, o.pod_name, o.pod_uid, o.enqueued_at) AS k
                        WHERE k.kind = 'pause') THEN 'paused'
           WHEN EXISTS (SELECT 1 FROM pod_sweeper.keeping(o.cluster, o.pod_namespace, o.pod_name, o.pod_uid, o.enqueued_at) AS k
                        WHERE k.kind = 'transaction') THEN 'large_transaction'
           WHEN EXISTS (SELECT 1 FROM pod_sweeper.breaker AS b
                        WHERE b.cluster = o.cluster AND b.tripped_at IS NOT NULL) THEN 'breaker'
           WHEN EXISTS (SELECT 1 FROM guards AS g
                        WHERE g.cluster = o.cluster
                          AND NOT coalesce(o.guard_enqueued_at = o.enqueued_at AND o.guard_lsn <= g.flushed, false))
                OR (o.guard_enqueued_at = o.enqueued_at
                    AND NOT EXISTS (SELECT 1 FROM fleet AS f WHERE f.cluster = o.cluster)) THEN 'replication_guard'
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
