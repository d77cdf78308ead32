-- The migration ledger, and the schema it lives in, when missing. Run under the migration lock: two
-- concurrent CREATE ... IF NOT EXISTS can still collide.
CREATE SCHEMA IF NOT EXISTS pod_sweeper;
CREATE TABLE IF NOT EXISTS pod_sweeper.schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    applied_by text NOT NULL DEFAULT current_user
)
;
-- The oldest schema version whose pod-sweeper may run on a schema with this migration (a newer
-- release's expand step declares the release before it readable): an older replica reads it from here,
-- since it does not ship the file. NULL: the migration's own version.
ALTER TABLE pod_sweeper.schema_migrations ADD COLUMN IF NOT EXISTS readable_from integer;
-- Who runs a migration in steps right now (outside any transaction, so no transaction lock can say
-- it): a lease, renewed while the steps run. Another migrate waits while it is fresh, and takes over
-- (running the steps again from the start, which each such file allows) once it is stale.
CREATE TABLE IF NOT EXISTS pod_sweeper.schema_migration_lease (
    version integer PRIMARY KEY,
    holder text NOT NULL,
    renewed_at timestamptz NOT NULL DEFAULT now()
)
