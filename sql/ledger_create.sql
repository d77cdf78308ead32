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
