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
-- Who runs a migration in steps right now (outside any transaction, so no transaction lock can say
-- it): a lease, renewed while the steps run. Another migrate waits while it is fresh, and takes over
-- (running the steps again from the start, which each such file allows) once it is stale.
CREATE TABLE IF NOT EXISTS pod_sweeper.schema_migration_lease (
    version integer PRIMARY KEY,
    holder text NOT NULL,
    renewed_at timestamptz NOT NULL DEFAULT now()
)
