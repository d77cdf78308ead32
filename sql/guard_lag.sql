-- The replication guard's view of the standbys it names (%(standbys)s): those connected now, and how far
-- the slowest one's flush is behind this server's WAL insert position, in bytes (NULL: one is missing,
-- or this role may not read their positions: it needs pg_read_all_stats, or pg_monitor).
SELECT count(DISTINCT application_name) AS connected,
       CASE WHEN count(DISTINCT application_name) = cardinality(%(standbys)s::text[]) AND count(flush_lsn) = count(*)
            THEN pg_wal_lsn_diff(pg_current_wal_insert_lsn(), min(flush_lsn))::float8 END AS lag_bytes
FROM pg_stat_replication
WHERE application_name = ANY(%(standbys)s::text[])
