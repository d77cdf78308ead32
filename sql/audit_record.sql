-- One operator action in the audit trail (migration 0011), in the action's own transaction.
INSERT INTO pod_sweeper.audit (actor, command, arguments, scope, affected)
VALUES (%(actor)s, %(command)s, %(arguments)s::jsonb, %(scope)s, %(affected)s)
RETURNING id
