-- `pod-sweeper release-transaction ID` ('released': its kept-back rows are due now, and the rule never
-- judges the transaction again) or `discard-transaction ID` ('discarded': its rows still pending are
-- ended as done, outcome 'discarded', no request sent, as `pod-sweeper discard` ends rows). Once: a
-- transaction already ended is left as it is (no row returned). Its open rows' count comes back.
WITH ended AS (
    UPDATE pod_sweeper.large_transactions
    SET ended_at = now(), ended_by = %(actor)s, ended = %(how)s
    WHERE id = %(id)s AND ended_at IS NULL
    RETURNING id, cluster, enqueued_at
),
released AS (
    UPDATE pod_sweeper.outbox AS o
    SET next_attempt_at = now(), updated_at = now()
    FROM ended AS e
    WHERE %(how)s = 'released'
      AND o.cluster = e.cluster AND o.status = 'pending' AND o.enqueued_at = e.enqueued_at
      AND o.next_attempt_at = pod_sweeper.kept_back_until()
    RETURNING o.id
),
discarded AS (
    UPDATE pod_sweeper.outbox AS o
    SET status = 'done', outcome = 'discarded', done_at = now(), next_attempt_at = now(), last_error = NULL,
        updated_at = now()
    FROM ended AS e
    WHERE %(how)s = 'discarded'
      AND o.cluster = e.cluster AND o.status = 'pending' AND o.enqueued_at = e.enqueued_at
    RETURNING o.id
)
SELECT e.id, e.cluster, e.enqueued_at,
       (SELECT count(*) FROM pod_sweeper.outbox AS o
        WHERE o.cluster = e.cluster AND o.status IN ('pending', 'claimed') AND o.enqueued_at = e.enqueued_at)
           AS open_rows,
       (SELECT count(*) FROM discarded) AS discarded
FROM ended AS e
