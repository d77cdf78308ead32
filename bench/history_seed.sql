-- The history a busy platform keeps, for bench/steps/history.py and for the plan test of every read an
-- on-call, a DBA or a replica runs (tests/integration/test_history_reads.py): %(done)s done rows, their
-- done_at spread evenly over the last 7 days (the default retention), half of them cluster east's, in
-- 20 namespaces, each with its DELETE attempt; 1 in 10 ended absent, the rest deleted and confirmed
-- gone, but 1 in 100,000 (at least one) still terminating past the limit (stuck, still watched);
-- %(open)s open rows (pending, due now) and %(dead)s dead ones, each with its failed attempts.
-- Ascending UUIDs, so that the unique index grows at its right edge and the seeding is quick.
INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid, reason,
                                status, outcome, attempts, claim_epoch, claimed_by, claimed_at, next_attempt_at,
                                enqueued_at, updated_at, done_at, confirm_after, confirmed_at, stuck_at,
                                last_http_status, cluster)
SELECT 1, 'sb-' || g, 1, 'ns-' || mod(g, 20), 'pod-' || g,
       ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'retired', 'done',
       CASE WHEN mod(g, 10) = 0 THEN 'absent' ELSE 'deleted' END, 1, 1, 'seed', t - interval '1 second',
       t - interval '1 second', t - interval '2 seconds', t, t,
       CASE WHEN mod(g, 100000) = 1 THEN now() + interval '10 seconds' END,
       CASE WHEN mod(g, 10) <> 0 AND mod(g, 100000) <> 1 THEN t + interval '30 seconds' END,
       CASE WHEN mod(g, 100000) = 1 THEN t + interval '5 minutes' END,
       CASE WHEN mod(g, 10) = 0 THEN 404 ELSE 200 END, CASE WHEN mod(g, 2) = 0 THEN 'east' ELSE 'default' END
FROM (SELECT g, now() - make_interval(secs => (%(done)s - g) * 604800.0 / %(done)s) AS t
      FROM generate_series(1, %(done)s) AS g) AS s;
INSERT INTO pod_sweeper.outbox (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid, reason,
                                status, attempts, last_error, last_http_status, cluster)
SELECT 1, 'open-' || g, 1, 'ns-' || mod(g, 20), 'open-' || g, gen_random_uuid(), 'retired',
       CASE WHEN g <= %(dead)s THEN 'dead' ELSE 'pending' END,
       CASE WHEN g <= %(dead)s THEN 10 ELSE 1 END,
       CASE WHEN g <= %(dead)s OR mod(g, 10) = 0 THEN 'DELETE answered 503: the API server is overloaded' END,
       CASE WHEN g <= %(dead)s OR mod(g, 10) = 0 THEN 503 END,
       CASE WHEN mod(g, 2) = 0 THEN 'east' ELSE 'default' END
FROM generate_series(1, %(open)s + %(dead)s) AS g;
INSERT INTO pod_sweeper.attempts (outbox_id, claim_epoch, replica, started_at, duration_ms, http_status, result,
                                  recorded)
SELECT id, 1, 'seed', coalesce(claimed_at, enqueued_at), 12.5, coalesce(last_http_status, 200),
       CASE WHEN status = 'done' THEN outcome WHEN status = 'dead' THEN 'dead' ELSE 'retry' END, true
FROM pod_sweeper.outbox;
