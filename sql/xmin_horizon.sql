-- Who pins this database's xmin horizon, oldest first: a transaction's snapshot (an open report,
-- a client idle in transaction), a replication slot, a prepared transaction, or a standby's
-- hot_standby_feedback. While one pins it, vacuum can remove no row version younger than it, and every
-- claim and record of the outbox walks over the versions the sweep leaves behind (docs/dba.md, "A snapshot
-- kept open"). age_xids is how many transactions old the pinned xmin is; seconds how long it has been pinned
-- where PostgreSQL says (a transaction's start; a slot or a standby has no time). Another role's
-- sessions show their xmin only to a role with pg_read_all_stats (or pg_monitor).
WITH holders AS (
    SELECT 'transaction' AS kind, pid::text AS holder, state AS detail, age(backend_xmin) AS age_xids,
           extract(epoch FROM now() - xact_start)::float8 AS seconds
    FROM pg_stat_activity
    WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
      AND datname = current_database()
    UNION ALL
    SELECT 'slot', slot_name::text, slot_type, age(coalesce(xmin, catalog_xmin)), NULL::float8
    FROM pg_replication_slots
    WHERE coalesce(xmin, catalog_xmin) IS NOT NULL AND (database IS NULL OR database = current_database())
    UNION ALL
    SELECT 'prepared', gid, owner::text, age(transaction), extract(epoch FROM now() - prepared)::float8
    FROM pg_prepared_xacts
    WHERE database = current_database()
    UNION ALL
    SELECT 'standby', application_name, client_addr::text, age(backend_xmin), NULL::float8
    FROM pg_stat_replication
    WHERE backend_xmin IS NOT NULL
)
SELECT kind, holder, detail, age_xids, seconds
FROM holders
ORDER BY age_xids DESC
LIMIT 5
