-- The breaker's transaction rule found one large host transaction in a claim of %(cluster)s (the claim
-- rolled back: nothing of it sent or charged): its rows are kept back from now on, as one batch, by
-- pod_sweeper.keeping (migration 0020), until an on-call releases it or discards them. Recorded once (a
-- second replica's claim may find it too), and left in the audit trail in the same statement.
WITH found AS (
    INSERT INTO pod_sweeper.large_transactions (cluster, enqueued_at, rows_found, reason, found_by)
    VALUES (%(cluster)s, %(at)s, %(rows)s, %(reason)s, %(who)s)
    ON CONFLICT ON CONSTRAINT large_transactions_key DO NOTHING
    RETURNING id, cluster, rows_found
)
INSERT INTO pod_sweeper.audit (actor, command, arguments, scope, affected)
SELECT %(who)s, 'large transaction kept back', jsonb_build_object('reason', %(reason)s::text, 'transaction', id),
       'cluster ' || cluster, rows_found
FROM found
RETURNING (arguments ->> 'transaction')::bigint AS id
