-- Record how a batch of claimed rows ended, one row per element of the JSON array, as the daemon's
-- answer table decided it (tasks/rules/verdicts.py): nothing here derives a status, an outcome or a result.
--   status 'done'    with its outcome (last_error cleared, last_http_status the final answer's);
--   status 'pending' again after delay seconds (refund 1: the attempt is given back, as for a hand-back);
--   status 'dead'    with its last error.
-- Fenced: a row of the replica's own cluster changes only while it is still claimed under the epoch
-- this replica claimed it with,
-- so a replica whose lease expired (and was taken over) changes nothing. Each element that carries a
-- request's start time is also written to the attempt history, fenced or not (recorded says which).
-- The final SELECT tells the caller which rows it still owned.
WITH f AS (
    -- The batch arrives as one JSON array of objects: one parameter, not twelve arrays (dumping
    -- twelve lists cost the daemon more CPU per row than the statement did; bench/README.md).
    SELECT *
    FROM json_to_recordset(%(rows)s::json)
         AS f(id bigint, epoch bigint, status text, outcome text, result text, delay float8, error text,
              http_status int, refund int, started timestamptz, duration_ms float8, reason text, confirm_in float8)
),
updated AS (
    UPDATE pod_sweeper.outbox AS o
    SET status = f.status,
        outcome = f.outcome,
        attempts = o.attempts - f.refund,
        next_attempt_at = CASE WHEN f.status = 'pending'
                               THEN now() + make_interval(secs => f.delay)
                               ELSE o.next_attempt_at END,
        -- last_error says why a row is not done: a done row has none (the history is in attempts), a
        -- row handed back without a reason (a shutdown) keeps the one it had
        last_error = CASE WHEN f.status = 'done' THEN NULL ELSE coalesce(f.error, o.last_error) END,
        last_http_status = CASE WHEN f.status = 'done' THEN f.http_status
                                ELSE coalesce(f.http_status, o.last_http_status) END,
        done_at = CASE WHEN f.status = 'done' THEN now() END,
        -- a pod left terminating (a grace period) is looked at again once the grace has passed
        confirm_after = CASE WHEN f.confirm_in IS NOT NULL THEN now() + make_interval(secs => f.confirm_in) END,
        confirmed_at = CASE WHEN f.outcome = 'deleted' AND f.confirm_in IS NULL THEN now() END,
        updated_at = now()
    FROM f
    WHERE o.id = f.id
      -- the ids once more, as an array parameter the primary key is searched with: the planner knows
      -- it is a few rows (of the JSON it guesses 100, and on a young table chose a scan of all of it)
      AND o.id = ANY (%(ids)s::bigint[])
      AND o.cluster = %(cluster)s
      AND o.claim_epoch = f.epoch
      -- Still claimed, said through lease_expires_at (set exactly while status = 'claimed') rather than
      -- status itself: `status = 'claimed'` would let the planner read the claimed rows off the claim
      -- index, every open row's, and while the xmin horizon is pinned, every version the claims and
      -- records left behind in it (bench held snapshot).
      AND o.lease_expires_at IS NOT NULL
    RETURNING o.id
),
history AS (
    INSERT INTO pod_sweeper.attempts
        (outbox_id, claim_epoch, replica, started_at, duration_ms, http_status, reason, result, error, recorded)
    SELECT f.id, f.epoch, %(replica)s::text, f.started, f.duration_ms, f.http_status, f.reason, f.result, f.error,
           f.id IN (SELECT id FROM updated)
    FROM f
    WHERE f.started IS NOT NULL
)
SELECT id FROM updated
