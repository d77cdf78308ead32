-- 0016: a year of history read through indexes. The done rows are nearly all of the outbox (a busy
-- platform keeps 60 million of them under the default retention), and `explain` looked a pod up by
-- name or a sandbox by id with a scan of all of them, `status` grouped every one of them. Two partial
-- indexes over the done rows only: the host's retire (an insert of a pending row) never writes to
-- them, and a row enters each once, when it is recorded done. `explain` by name reads the open rows
-- through the claim index, the dead through theirs and the done through these. The summary view counts open and dead rows exactly and the done rows of the
-- last hour (the done_at index); the total of done rows is the planner's estimate (status says so).
--
-- readable from: 0015 (two indexes and a view with two more columns: older replicas read none of them)
--
-- Locks: CREATE INDEX CONCURRENTLY takes SHARE UPDATE EXCLUSIVE, which lets inserts and updates go on;
-- a build that failed leaves an invalid index, dropped first so that a new try builds a valid one.
-- CREATE OR REPLACE VIEW locks the view alone, for a moment.

-- step: alone
DROP INDEX CONCURRENTLY IF EXISTS pod_sweeper.outbox_done_pod;
-- step: alone
-- By name, namespace first: `explain NAMESPACE/NAME` reads it directly, a bare name once per namespace
-- (a loose scan, sql/explain_outbox.sql).
CREATE INDEX CONCURRENTLY outbox_done_pod ON pod_sweeper.outbox (pod_namespace, pod_name) WHERE status = 'done';
-- step: alone
DROP INDEX CONCURRENTLY IF EXISTS pod_sweeper.outbox_done_sandbox;
-- step: alone
CREATE INDEX CONCURRENTLY outbox_done_sandbox ON pod_sweeper.outbox (sandbox_id) WHERE status = 'done';
-- step: in a transaction
-- Rows by status and outcome, for `pod-sweeper status` and for DBAs, each part through its partial
-- index: the open and dead rows all of them (counted_since NULL), the done rows those done in the last
-- hour by outcome (counted_since says from when), and one line for every done row (outcome NULL), whose
-- count is the planner's (estimated: the done_at index's size at the last VACUUM or ANALYZE, none
-- before the first).
CREATE OR REPLACE VIEW pod_sweeper.summary AS
SELECT status, outcome, count(*) AS rows, min(enqueued_at) AS oldest_enqueued_at,
       max(updated_at) AS last_updated_at, NULL::timestamptz AS counted_since, false AS estimated
FROM pod_sweeper.outbox
WHERE status IN ('pending', 'claimed')
GROUP BY status, outcome
UNION ALL
SELECT status, outcome, count(*), min(enqueued_at), max(updated_at), NULL::timestamptz, false
FROM pod_sweeper.outbox
WHERE status = 'dead'
GROUP BY status, outcome
UNION ALL
SELECT status, outcome, count(*), min(enqueued_at), max(updated_at), now() - interval '1 hour', false
FROM pod_sweeper.outbox
WHERE status = 'done' AND done_at > now() - interval '1 hour'
GROUP BY status, outcome
UNION ALL
SELECT 'done', NULL, c.reltuples::bigint, NULL, NULL, NULL, true
FROM pg_class AS c
WHERE c.oid = 'pod_sweeper.outbox_done_at'::regclass AND c.reltuples >= 0;
