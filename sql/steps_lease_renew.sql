-- Renew the lease of a migration in steps while its steps run (a short transaction of its own).
UPDATE pod_sweeper.schema_migration_lease SET renewed_at = now()
WHERE version = %(version)s AND holder = %(holder)s
