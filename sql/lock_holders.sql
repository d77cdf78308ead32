-- After a migration gave up on a lock: the oldest other transaction holding a lock on a relation of our
-- schema, the one to ask about (or wait for). xact_start and state are NULL for another role's sessions
-- unless this role may read all statistics (pg_read_all_stats).
SELECT a.pid, a.application_name, a.usename, a.state,
       extract(epoch FROM now() - a.xact_start)::float8 AS seconds,
       n.nspname || '.' || c.relname AS relation, l.mode
FROM pg_locks AS l
JOIN pg_class AS c ON c.oid = l.relation
JOIN pg_namespace AS n ON n.oid = c.relnamespace
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE n.nspname = 'pod_sweeper' AND l.granted AND l.pid <> pg_backend_pid()
ORDER BY a.xact_start NULLS LAST, a.pid
LIMIT 1
