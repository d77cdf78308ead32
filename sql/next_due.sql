-- Seconds until the next row of %(cluster)s becomes claimable (a backoff ending or a lease expiring);
-- NULL when it has no open row. The sweeper sleeps until then rather than on a fixed tick. A row a
-- pause or a hold keeps back (pod_sweeper.keeping, migration 0015) is not due before the pause or the
-- hold ends: their ends count as due times too (one needless claim at most, when nothing was behind them).
-- Read from %(floor)s on, as the claim reads (store/sweep/cursor.py), and no further than %(horizon)s seconds
-- ahead (the longest the caller sleeps anyway): the claims in hand are due at their leases' ends, and
-- while the xmin horizon is pinned the versions of every claim of the last lease lie between. low (the
-- next due time of a row in that range, NULL: none) and now are what the cursor moves its floor up to.
-- With the replication guard (%(guard)s, migration 0014), a row the guard holds (its mark current, not
-- yet flushed on every named standby, or a named standby missing) is not due either: what ends its wait
-- is a standby's progress, which no due time says, so it is looked at again in %(recheck)s seconds (the
-- caller's interval, store/sweep/outbox.py) instead of at once, in a loop (issue: 230 claims a second while
-- holding). Its due time still bounds low, so the floor stays below it.
WITH standbys AS (
    SELECT CASE WHEN count(DISTINCT application_name) = cardinality(%(guard)s::text[]) THEN min(flush_lsn) END AS flushed
    FROM pg_stat_replication
    WHERE %(guard)s::text[] IS NOT NULL AND application_name = ANY(%(guard)s::text[])
),
low AS (
    -- min() over the claim index in due order: the walk stops at the first row that qualifies
    SELECT min(o.next_attempt_at) AS at
    FROM pod_sweeper.outbox AS o
    WHERE o.status IN ('pending', 'claimed') AND o.cluster = %(cluster)s AND o.next_attempt_at >= %(floor)s
      AND o.next_attempt_at <= now() + make_interval(secs => %(horizon)s)
      AND NOT EXISTS (SELECT 1 FROM pod_sweeper.keeping(o.cluster, o.pod_namespace, o.pod_name, o.pod_uid))
      AND NOT (%(guard)s::text[] IS NOT NULL AND o.guard_enqueued_at IS NOT DISTINCT FROM o.enqueued_at
               AND NOT coalesce(o.guard_lsn <= (SELECT flushed FROM standbys), false))
),
kept_back AS (
    SELECT min(o.next_attempt_at) AS at
    FROM pod_sweeper.outbox AS o
    WHERE %(guard)s::text[] IS NOT NULL
      AND o.status IN ('pending', 'claimed') AND o.cluster = %(cluster)s AND o.next_attempt_at >= %(floor)s
      AND o.next_attempt_at <= now()
      AND NOT EXISTS (SELECT 1 FROM pod_sweeper.keeping(o.cluster, o.pod_namespace, o.pod_name, o.pod_uid))
      AND o.guard_enqueued_at IS NOT DISTINCT FROM o.enqueued_at
      AND NOT coalesce(o.guard_lsn <= (SELECT flushed FROM standbys), false)
)
SELECT extract(epoch FROM least(
    low.at,
    CASE WHEN kept_back.at IS NOT NULL THEN now() + make_interval(secs => %(recheck)s) END,
    (SELECT min(until) FROM pod_sweeper.pauses WHERE cluster = %(cluster)s AND pod_sweeper.in_force(until)),
    (SELECT min(until) FROM pod_sweeper.holds WHERE cluster = %(cluster)s AND pod_sweeper.in_force(until))
) - now())::float8 AS seconds,
       least(low.at, kept_back.at) AS low,
       kept_back.at IS NOT NULL AS kept_back,
       now() AS now,
       -- The wakeup flag as it is (migration 0018): the claimer's turn reads it here, so that arming, the
       -- one write that takes the exclusive lock every retire queues behind, runs only when it is needed,
       -- in a statement of its own after the turn has committed (sql/arm.sql).
       flag.armed AS flag_armed,
       flag.changed_by AS flag_by
FROM low, kept_back
LEFT JOIN pod_sweeper.wakeup AS flag ON flag.cluster = %(cluster)s
