-- The audit trail: every operator action (pause, unpause, hold, release, retry, discard, reset-breaker,
-- prune by hand, attach, detach, grant, backfill) and every breaker trip, newest first. `affected` is
-- the rows the action changed; `db_role` the database role that ran it, `actor` the operator it named
-- (--actor, default the login name).
SELECT id, at, actor, db_role, command, scope, affected, arguments
FROM pod_sweeper.audit
ORDER BY at DESC, id DESC
LIMIT 200;
