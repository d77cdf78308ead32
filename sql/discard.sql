-- `pod-sweeper discard`: end these rows as done, outcome 'discarded', if they are still pending or
-- dead (a claimed row belongs to a replica right now and is left alone). Like every done row it keeps
-- no last_error; who discarded it and why are in the audit trail.
UPDATE pod_sweeper.outbox
SET status = 'done',
    outcome = 'discarded',
    done_at = now(),
    next_attempt_at = now(),
    last_error = NULL,
    updated_at = now()
WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('pending', 'dead')
RETURNING id
