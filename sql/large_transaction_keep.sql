-- The breaker's transaction rule found one large host transaction in a claim of %(cluster)s (the claim
-- rolled back: nothing of it sent or charged): its rows are kept back from now on, as one batch, until an
-- on-call releases it or discards them (migration 0020): recorded once (a second replica's claim may find
-- it too), its pending rows due at pod_sweeper.kept_back_until() (no claim reaches them, not even one
-- whose snapshot is older than this statement: its FOR UPDATE re-reads the row), and left in the audit
-- trail, all in this statement. Through the claim index: the cluster's open rows.
WITH found AS (
    INSERT INTO pod_sweeper.large_transactions (cluster, enqueued_at, rows_found, reason, found_by)
    VALUES (%(cluster)s, %(at)s, %(rows)s, %(reason)s, %(who)s)
    ON CONFLICT ON CONSTRAINT large_transactions_key DO NOTHING
    RETURNING id, cluster, rows_found
),
kept AS (
    UPDATE pod_sweeper.outbox AS o
    SET next_attempt_at = pod_sweeper.kept_back_until(), updated_at = now()
    WHERE o.cluster = %(cluster)s AND o.status = 'pending' AND o.enqueued_at = %(at)s
      AND (EXISTS (SELECT 1 FROM found)
           OR EXISTS (SELECT 1 FROM pod_sweeper.large_transactions AS t
                      WHERE t.cluster = %(cluster)s AND t.enqueued_at = %(at)s AND t.ended_at IS NULL))
    RETURNING o.id
)
INSERT INTO pod_sweeper.audit (actor, command, arguments, scope, affected)
SELECT %(who)s, 'large transaction kept back', jsonb_build_object('reason', %(reason)s::text, 'transaction', id),
       'cluster ' || cluster, rows_found
FROM found
RETURNING (arguments ->> 'transaction')::bigint AS id
