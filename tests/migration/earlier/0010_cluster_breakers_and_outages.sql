-- 0010: a breaker per cluster, the API outages replicas see, and a done row's last_error cleared.
--
-- The blast-radius breaker was one row for every cluster, counting every cluster's deletes: one
-- cluster's burst stopped every cluster. Now each cluster has its own row, its own budget (its own
-- deletes in the last minute) and its own trip; `pod-sweeper resume --cluster NAME` closes one.
-- A breaker tripped before this migration held every cluster, so it stays tripped for every cluster it
-- held (each known one: attached, with a wakeup row, or with open rows), with its reason kept and a note;
-- each is resumed on its own.
ALTER TABLE pod_sweeper.breaker DROP CONSTRAINT breaker_pkey;
ALTER TABLE pod_sweeper.breaker DROP CONSTRAINT breaker_id_check;
ALTER TABLE pod_sweeper.breaker DROP COLUMN id;
ALTER TABLE pod_sweeper.breaker ADD COLUMN cluster text NOT NULL DEFAULT 'default' PRIMARY KEY;
UPDATE pod_sweeper.breaker
SET reason = reason || ' (tripped before migration 0010, when one breaker held every cluster)'
WHERE tripped_at IS NOT NULL;
INSERT INTO pod_sweeper.breaker (cluster, tripped_at, reason, tripped_by, resumed_at, resumed_by)
SELECT known.cluster, b.tripped_at, b.reason, b.tripped_by, b.resumed_at, b.resumed_by
FROM (
    SELECT cluster FROM pod_sweeper.attachments
    UNION SELECT cluster FROM pod_sweeper.wakeup
    UNION SELECT cluster FROM pod_sweeper.outbox WHERE status IN ('pending', 'claimed')  -- the claim index
) AS known
CROSS JOIN pod_sweeper.breaker AS b
WHERE b.cluster = 'default' AND known.cluster <> 'default'
ON CONFLICT (cluster) DO NOTHING;
COMMENT ON TABLE pod_sweeper.breaker IS
    'pod-sweeper: the blast-radius breaker of each cluster (tripped_at set: no delete there until resume)';

-- The breaker counts one cluster's deletes of the last minute: the attempts it joins come from the
-- outbox rows of that cluster. (attempts_recent_deletes still finds the minute's attempts.)

-- An API server a replica cannot reach (refused connections, timeouts, 5xx with a failing health
-- check): one row per replica while it lasts, written by the replica when its outage gate closes and
-- updated at each failed probe (probed_at), deleted when a probe is answered. Rows wait uncharged
-- meanwhile. A replica that dies mid-outage leaves a row whose probed_at stops moving: the alert and
-- `status` read only rows probed in the last two minutes, and retention deletes rows an hour stale.
CREATE TABLE pod_sweeper.outages (
    cluster    text        NOT NULL,
    replica    text        NOT NULL,
    since      timestamptz NOT NULL,
    reason     text        NOT NULL,
    probed_at  timestamptz NOT NULL,
    PRIMARY KEY (cluster, replica)
);
COMMENT ON TABLE pod_sweeper.outages IS
    'pod-sweeper: API servers replicas cannot reach now, one row per replica (see probed_at)';

-- last_error says why a row is not done: a done row has none (its history stays in pod_sweeper.attempts),
-- so `WHERE last_error IS NOT NULL` finds only rows that wait or died. Done rows are kept for the
-- retention window only, and few of them ever failed.
UPDATE pod_sweeper.outbox SET last_error = NULL WHERE status = 'done' AND last_error IS NOT NULL;
