-- Reopen rows for another round: dead rows (all of them, or by id) and, by id, done rows. Claimed and
-- pending rows are left alone (a claimed row belongs to a replica right now). Attempts start again
-- from 0; what happened is kept at the front of last_error.
UPDATE pod_sweeper.outbox
SET status = 'pending',
    outcome = NULL,
    attempts = 0,
    next_attempt_at = now(),
    done_at = NULL,
    last_error = format('reopened by %%s at %%s (was %%s%%s)', %(who)s::text, now(), status,
                        coalesce(': ' || last_error, '')),
    updated_at = now()
WHERE (status = 'dead' AND %(all_dead)s::boolean)
   OR (status IN ('dead', 'done') AND id = ANY(%(ids)s::bigint[]))
RETURNING id
