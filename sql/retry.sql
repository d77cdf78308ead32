-- `pod-sweeper retry`: reopen these rows for another round, if they are still dead or done (a row
-- that changed since the match is left alone; claimed and pending rows are never touched). Attempts
-- start again from 0; what happened is kept at the front of last_error.
UPDATE pod_sweeper.outbox
SET status = 'pending',
    outcome = NULL,
    attempts = 0,
    next_attempt_at = now(),
    done_at = NULL,
    last_error = format('reopened by %%s at %%s (was %%s%%s)', %(who)s::text, now(), status,
                        coalesce(': ' || last_error, '')),
    updated_at = now()
WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('dead', 'done')
RETURNING id
