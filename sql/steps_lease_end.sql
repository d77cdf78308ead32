-- The migration in steps is recorded: its lease ends (in the record's transaction).
DELETE FROM pod_sweeper.schema_migration_lease WHERE version = %(version)s AND holder = %(holder)s
