-- Record how a batch of claimed rows ended, one row per element of the arrays:
--   status 'done'    with its outcome;
--   status 'pending' to retry after delay seconds (refund 1 for a hand-back or an auth failure, which
--                    are not charged as attempts);
--   status 'dead'    with its last error.
-- Fenced: a row changes only while it is still claimed under the epoch this replica claimed it with,
-- so a replica whose lease expired (and was taken over) changes nothing. RETURNING tells the caller
-- which rows it still owned.
UPDATE pod_sweeper.outbox AS o
SET status = f.status,
    outcome = f.outcome,
    attempts = o.attempts - f.refund,
    next_attempt_at = CASE WHEN f.status = 'pending'
                           THEN now() + make_interval(secs => f.delay)
                           ELSE o.next_attempt_at END,
    last_error = coalesce(f.error, o.last_error),
    last_http_status = coalesce(f.http_status, o.last_http_status),
    done_at = CASE WHEN f.status = 'done' THEN now() END,
    updated_at = now()
FROM unnest(%(ids)s::bigint[], %(epochs)s::bigint[], %(statuses)s::text[], %(outcomes)s::text[],
            %(delays)s::float8[], %(errors)s::text[], %(http_statuses)s::int[], %(refunds)s::int[])
     AS f(id, epoch, status, outcome, delay, error, http_status, refund)
WHERE o.id = f.id
  AND o.claim_epoch = f.epoch
  AND o.status = 'claimed'
RETURNING o.id
