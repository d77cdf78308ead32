-- Record how a batch of claimed rows ended, one row per element of the arrays:
--   status 'done'    with its outcome;
--   status 'pending' to retry after delay seconds (refund 1 for a hand-back or an auth failure, which
--                    are not charged as attempts);
--   status 'dead'    with its last error.
-- Fenced: a row changes only while it is still claimed under the epoch this replica claimed it with,
-- so a replica whose lease expired (and was taken over) changes nothing. Each element that carries a
-- request's start time is also written to the attempt history, fenced or not (recorded says which).
-- The final SELECT tells the caller which rows it still owned.
WITH f AS (
    SELECT *
    FROM unnest(%(ids)s::bigint[], %(epochs)s::bigint[], %(statuses)s::text[], %(outcomes)s::text[],
                %(delays)s::float8[], %(errors)s::text[], %(http_statuses)s::int[], %(refunds)s::int[],
                %(started)s::timestamptz[], %(durations)s::float8[], %(reasons)s::text[],
                %(confirm_in)s::float8[])
         AS f(id, epoch, status, outcome, delay, error, http_status, refund, started, duration_ms, reason,
              confirm_in)
),
updated AS (
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
        -- a pod left terminating (a grace period) is looked at again once the grace has passed
        confirm_after = CASE WHEN f.confirm_in IS NOT NULL THEN now() + make_interval(secs => f.confirm_in) END,
        confirmed_at = CASE WHEN f.outcome = 'deleted' AND f.confirm_in IS NULL THEN now() END,
        updated_at = now()
    FROM f
    WHERE o.id = f.id
      AND o.claim_epoch = f.epoch
      AND o.status = 'claimed'
    RETURNING o.id
),
history AS (
    INSERT INTO pod_sweeper.attempts
        (outbox_id, claim_epoch, replica, started_at, duration_ms, http_status, reason, result, error, recorded)
    SELECT f.id, f.epoch, %(replica)s::text, f.started, f.duration_ms, f.http_status, f.reason,
           CASE WHEN f.outcome IS NOT NULL THEN f.outcome
                WHEN f.status = 'dead' THEN 'dead'
                WHEN f.refund = 1 THEN 'handed_back'
                ELSE 'retry' END,
           f.error,
           f.id IN (SELECT id FROM updated)
    FROM f
    WHERE f.started IS NOT NULL
)
SELECT id FROM updated
