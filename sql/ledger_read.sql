-- The migrations applied to this database, with the checksum each had and the oldest schema version
-- whose pod-sweeper may run on it (NULL: its own). Read through to_jsonb, so that a ledger from before
-- the column (a database not migrated by this release yet) reads as NULL instead of failing.
SELECT version, checksum, (to_jsonb(m) ->> 'readable_from')::integer AS readable_from
FROM pod_sweeper.schema_migrations AS m
ORDER BY version
