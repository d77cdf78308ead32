-- The on-call alerts, for teams that alert from Postgres: one row per condition that holds now (no
-- rows: all clear). The conditions of deploy/monitoring/prometheusrule.yaml, each with its `for:` duration folded
-- into the threshold, since a query sees one moment: "over T for D" becomes "over T + D" for an age
-- that only grows while the condition holds. PodSweeperNotReady has no SQL form: a replica's
-- readiness is read by its probe (its row in pod_sweeper.replicas says it as of its last heartbeat, and
-- PodSweeperNoLiveReplica covers a cluster with none). The replication guard's standbys are the live
-- replicas' own, from pod_sweeper.replicas. Each condition that can hold for one cluster names it. Ages in seconds.
-- The open rows are read once (the CTEs), so the query costs one pass over the open rows and the
-- done rows of the last 20 minutes, whatever the history holds; as a side effect the planner does not
-- start parallel workers for it (their start was most of its time at 1 M done rows).
WITH lag AS MATERIALIZED (SELECT cluster, oldest_claimable_seconds FROM pod_sweeper.lag_by_cluster),
open AS MATERIALIZED (SELECT cluster, pod_namespace, status, enqueued_at, claimed_at, last_http_status,
                             claimed_by, next_attempt_at, guard_lsn, guard_enqueued_at
                      FROM pod_sweeper.outbox WHERE status IN ('pending', 'claimed'))
SELECT 'PodSweeperLagHigh' AS alert,
       format('cluster %s: the oldest claimable row has waited %s s (300 s, for 10 min)', cluster,
              round(oldest_claimable_seconds)) AS detail
FROM lag WHERE oldest_claimable_seconds > 300 + 600
UNION ALL
SELECT 'PodSweeperDeadRows',
       format('cluster %s: %s dead row(s) for over 5 min; see `pod-sweeper sql dead`', cluster, count(*))
FROM pod_sweeper.outbox WHERE status = 'dead' AND updated_at < now() - interval '5 minutes'
GROUP BY cluster
UNION ALL
SELECT 'PodSweeperRejectedRetires',
       format('cluster %s: %s retire(s) enqueued nothing (NULL or empty fields, a malformed UID) over 5 min ago;'
              ' see pod_sweeper.rejects', coalesce(nullif(cluster, ''), '(none)'), count(*))
FROM pod_sweeper.rejects WHERE rejected_at < now() - interval '5 minutes'
GROUP BY coalesce(nullif(cluster, ''), '(none)')
UNION ALL
SELECT 'PodSweeperStuckClaim',
       format('cluster %s: a claim has been open %s s (600 s, for 5 min); its replica may be frozen', cluster,
              round(extract(epoch FROM now() - min(claimed_at))))
FROM open WHERE status = 'claimed'
GROUP BY cluster
HAVING min(claimed_at) < now() - interval '900 seconds'
UNION ALL
SELECT 'PodSweeperClusterUnswept',
       format('cluster %s: the oldest claimable row has waited %s s (600 s, for 5 min); is its sweeper running?',
              cluster, round(oldest_claimable_seconds))
FROM lag WHERE oldest_claimable_seconds > 600 + 300
UNION ALL
SELECT 'PodSweeperLargeTransaction',
       format('cluster %s: large transaction %s (begun %s) is kept back, its rows neither sent nor charged: %s;'
              ' `pod-sweeper release-transaction %s` or `discard-transaction %s --reason TEXT` after a look',
              cluster, id, enqueued_at, reason, id, id)
FROM pod_sweeper.large_transactions WHERE ended_at IS NULL
UNION ALL
SELECT 'PodSweeperNoLiveReplica',
       format('cluster %s: %s open row(s), the oldest enqueued %s s ago, and no live replica (pod_sweeper.replicas;'
              ' `pod-sweeper sql replicas` says which stopped, and when)', s.cluster, s.open_rows,
              round(s.oldest_seconds))
FROM (SELECT cluster, count(*) AS open_rows, extract(epoch FROM now() - min(enqueued_at)) AS oldest_seconds
      FROM open GROUP BY cluster) AS s
WHERE s.oldest_seconds > 120
  AND NOT EXISTS (SELECT 1 FROM pod_sweeper.replicas AS r
                  WHERE r.cluster = s.cluster AND pod_sweeper.replica_state(r) = 'live')
  -- a replica at work there that keeps no row is an older release's, sweeping unseen (a rolling upgrade)
  AND NOT EXISTS (SELECT 1 FROM open AS o
                  WHERE o.cluster = s.cluster AND o.status = 'claimed' AND o.next_attempt_at > now()
                    AND NOT EXISTS (SELECT 1 FROM pod_sweeper.replicas AS r WHERE r.replica = o.claimed_by))
  AND NOT EXISTS (SELECT 1 FROM pod_sweeper.wakeup AS w
                  WHERE w.cluster = s.cluster AND w.changed_by IS NOT NULL AND w.changed_at > now() - interval '1 hour'
                    AND NOT EXISTS (SELECT 1 FROM pod_sweeper.replicas AS r WHERE r.replica = w.changed_by))
UNION ALL
SELECT 'PodSweeperReplicationGuardHolding',
       format('cluster %s: the replication guard (standbys %s, as its live replicas run it) has kept back %s row(s),'
              ' the oldest for %s s (300 s, for 2 min): a standby it names is behind or not connected', g.cluster,
              array_to_string(g.guard, ', '), count(*), round(extract(epoch FROM now() - min(o.enqueued_at))))
FROM (SELECT DISTINCT r.cluster, r.guard FROM pod_sweeper.replicas AS r
      WHERE r.guard IS NOT NULL AND pod_sweeper.replica_state(r) = 'live') AS g
CROSS JOIN LATERAL (SELECT CASE WHEN count(DISTINCT s.application_name) = cardinality(g.guard)
                                THEN min(s.flush_lsn) END AS flushed
                    FROM pg_stat_replication AS s WHERE s.application_name = ANY(g.guard)) AS f
JOIN open AS o ON o.cluster = g.cluster
WHERE NOT coalesce(o.guard_enqueued_at = o.enqueued_at AND o.guard_lsn <= f.flushed, false)
GROUP BY g.cluster, g.guard
HAVING min(o.enqueued_at) < now() - interval '420 seconds'
UNION ALL
SELECT 'PodSweeperNamespaceRefused',
       format('cluster %s, namespace %s answers 403: %s row(s) waiting, the oldest for %s s (for 15 min)',
              cluster, pod_namespace, count(*), round(extract(epoch FROM now() - min(enqueued_at))))
FROM open
WHERE status = 'pending' AND last_http_status = 403
GROUP BY cluster, pod_namespace
HAVING min(enqueued_at) < now() - interval '15 minutes'
UNION ALL
SELECT 'PodSweeperBreakerTripped',
       format('cluster %s: the blast-radius breaker tripped %s s ago (%s); no pod of it is deleted until'
              ' `pod-sweeper reset-breaker --cluster %s`', cluster, round(extract(epoch FROM now() - tripped_at)),
              reason, cluster)
FROM pod_sweeper.breaker WHERE tripped_at IS NOT NULL
UNION ALL
SELECT 'PodSweeperKubeUnreachable',
       format('cluster %s: its API server cannot be reached from %s replica(s) for %s s (for 5 min); its rows wait',
              cluster, count(*), round(extract(epoch FROM now() - min(since))))
FROM pod_sweeper.outages
WHERE probed_at > now() - interval '2 minutes'  -- reports still renewed (a dead replica's are not)
GROUP BY cluster
HAVING min(since) < now() - interval '5 minutes'
UNION ALL
SELECT 'PodSweeperPausedLong',
       format('cluster %s, namespace %s: paused for %s s by %s (%s); `pod-sweeper unpause` ends it', cluster,
              coalesce(nullif(pod_namespace, ''), '*'), round(extract(epoch FROM now() - since)), actor, reason)
FROM pod_sweeper.pauses WHERE pod_sweeper.in_force(until) AND since < now() - interval '2 hours'
UNION ALL
SELECT 'PodSweeperNoProgress',
       format('cluster %s: rows are claimable but none finished in 20 minutes (10 min window, for 10 min)', l.cluster)
FROM lag AS l
WHERE l.oldest_claimable_seconds > 60 + 600
  AND NOT EXISTS (SELECT 1 FROM pod_sweeper.outbox AS o
                  WHERE o.status = 'done' AND o.done_at >= now() - interval '20 minutes' AND o.cluster = l.cluster);
