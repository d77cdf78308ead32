-- The migrations applied to this database, with the checksum each had.
SELECT version, checksum FROM pod_sweeper.schema_migrations ORDER BY version
