-- The replication guard's view, for the metrics refresher: of the standbys it names (%(standbys)s),
-- how many are connected and how many are missing; how far the slowest connected one is behind in
-- flushing (bytes behind this server's WAL insert position, and its flush_lag in seconds; NULL: none is
-- connected, or this role may not read their positions: it needs pg_read_all_stats, or pg_monitor); and
-- what the guard holds of %(cluster)s's open rows now: rows whose mark is current but not yet flushed on
-- every named standby (all of them while one is missing), and how long the oldest has waited since its
-- retire. O(open rows): the claim index.
WITH standbys AS (
    SELECT count(DISTINCT application_name) AS connected,
           CASE WHEN count(flush_lsn) = count(*) THEN min(flush_lsn) END AS flushed,
           max(extract(epoch FROM flush_lag))::float8 AS lag_seconds
    FROM pg_stat_replication
    WHERE application_name = ANY(%(standbys)s::text[])
),
kept_back AS (
    SELECT count(*) AS rows, coalesce(extract(epoch FROM now() - min(o.enqueued_at)), 0)::float8 AS oldest_seconds
    FROM pod_sweeper.outbox AS o, standbys AS s
    WHERE o.status IN ('pending', 'claimed') AND o.cluster = %(cluster)s
      AND o.guard_enqueued_at = o.enqueued_at
      AND NOT coalesce(o.guard_lsn <= CASE WHEN s.connected = cardinality(%(standbys)s::text[]) THEN s.flushed END,
                       false)
)
SELECT s.connected,
       cardinality(%(standbys)s::text[]) - s.connected AS missing,
       pg_wal_lsn_diff(pg_current_wal_insert_lsn(), s.flushed)::float8 AS lag_bytes,
       s.lag_seconds,
       h.rows AS kept_back_rows,
       h.oldest_seconds AS oldest_kept_back_seconds
FROM standbys AS s, kept_back AS h
