-- Take the lease of a migration in steps, unless another migrate holds it and renewed it within
-- %(lease_seconds)s: no row back means it does.
INSERT INTO pod_sweeper.schema_migration_lease AS l (version, holder) VALUES (%(version)s, %(holder)s)
ON CONFLICT (version) DO UPDATE SET holder = excluded.holder, renewed_at = now()
WHERE l.holder = excluded.holder OR l.renewed_at < now() - make_interval(secs => %(lease_seconds)s::float8)
RETURNING holder
