-- 0008: a retire the outbox cannot hold never fails the host application's write, and is never silent.
-- Before this, a NULL namespace, name, sandbox id or generation made the enqueue's INSERT fail the
-- host's UPDATE (NOT NULL), and a text UID that is not a UID enqueued nothing but a server WARNING. Now
-- each becomes a row of pod_sweeper.rejects, with the host row's key and the problem, which the lag
-- view counts (`rejected`), the daemon exports (pod_sweeper_rejected_retires) and both alert forms page
-- on. Names and values of any length and content are stored as given (cut at 1,000 characters).

CREATE TABLE pod_sweeper.rejects (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    attachment_id integer     NOT NULL,
    reason        text        NOT NULL,  -- what the retire was: 'retired' or 'row_deleted'
    sandbox_id    text,
    generation    bigint,
    pod_namespace text,
    pod_name      text,
    pod_uid       text,                  -- as the host row held it, a UID or not
    problem       text        NOT NULL,
    rejected_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE pod_sweeper.rejects IS
    'pod-sweeper: retires that named no pod Kubernetes could hold (NULL or empty fields, a malformed UID); '
    'nothing was enqueued; delete a row once its cause is fixed';

CREATE FUNCTION pod_sweeper.reject(
    p_attachment_id integer,
    p_sandbox_id    text,
    p_generation    bigint,
    p_namespace     text,
    p_pod_name      text,
    p_pod_uid       text,
    p_reason        text,
    p_problem       text
) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO pod_sweeper.rejects
        (attachment_id, reason, sandbox_id, generation, pod_namespace, pod_name, pod_uid, problem)
    VALUES (p_attachment_id, p_reason, left(p_sandbox_id, 1000), p_generation, left(p_namespace, 1000),
            left(p_pod_name, 1000), left(p_pod_uid, 1000), p_problem);
$$;
REVOKE ALL ON FUNCTION pod_sweeper.reject(integer, text, bigint, text, text, text, text, text) FROM PUBLIC;

-- The enqueue as 0007 left it, with one check first: the fields the outbox needs, present and not empty.
CREATE OR REPLACE FUNCTION pod_sweeper.enqueue(
    p_attachment_id integer,
    p_sandbox_id    text,
    p_generation    bigint,
    p_namespace     text,
    p_pod_name      text,
    p_pod_uid       uuid,
    p_reason        text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_sandbox_id IS NULL OR p_generation IS NULL OR p_pod_uid IS NULL
       OR p_namespace IS NULL OR p_namespace = '' OR p_pod_name IS NULL OR p_pod_name = '' THEN
        PERFORM pod_sweeper.reject(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
            p_pod_uid::text, p_reason,
            concat_ws(', ',
                CASE WHEN p_sandbox_id IS NULL THEN 'sandbox_id is NULL' END,
                CASE WHEN p_generation IS NULL THEN 'generation is NULL' END,
                CASE WHEN p_namespace IS NULL THEN 'pod_namespace is NULL'
                     WHEN p_namespace = '' THEN 'pod_namespace is empty' END,
                CASE WHEN p_pod_name IS NULL THEN 'pod_name is NULL'
                     WHEN p_pod_name = '' THEN 'pod_name is empty' END,
                CASE WHEN p_pod_uid IS NULL THEN 'pod_uid is NULL' END));
        RETURN;
    END IF;
    INSERT INTO pod_sweeper.outbox AS o
        (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid, reason)
    VALUES
        (p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name, p_pod_uid, p_reason)
    ON CONFLICT (pod_uid) DO UPDATE
        SET attachment_id = EXCLUDED.attachment_id,
            sandbox_id = EXCLUDED.sandbox_id,
            generation = EXCLUDED.generation,
            pod_namespace = EXCLUDED.pod_namespace,
            pod_name = EXCLUDED.pod_name,
            reason = EXCLUDED.reason,
            status = 'pending',
            outcome = NULL,
            attempts = 0,
            next_attempt_at = now(),
            last_error = NULL,
            last_http_status = NULL,
            enqueued_at = now(),
            updated_at = now(),
            done_at = NULL
        WHERE o.status = 'done' AND o.outcome = 'skipped_active';
    -- The lock first, then the flag, each its own statement: the flag's snapshot follows the lock.
    PERFORM pg_advisory_xact_lock_shared(8101804718561125749);
    -- A missing row reads as armed: notifying is the safe side.
    IF (SELECT w.armed FROM pod_sweeper.wakeup AS w) IS NOT FALSE
       OR current_setting('transaction_isolation') <> 'read committed' THEN
        -- An empty payload: notifications with equal payloads fold within one transaction.
        PERFORM pg_notify('pod_sweeper', '');
    END IF;
END;
$$;

-- A host column of a text type holding the UID: the trigger passes it as it is. Every form PostgreSQL
-- reads as a uuid is matched by the pattern first, so the cast cannot fail, and no subtransaction
-- (an EXCEPTION block) is paid on every retire; anything else is a reject.
CREATE FUNCTION pod_sweeper.enqueue_text_uid(
    p_attachment_id integer,
    p_sandbox_id    text,
    p_generation    bigint,
    p_namespace     text,
    p_pod_name      text,
    p_pod_uid       text,
    p_reason        text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_pod_uid ~ '^\{?[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7}\}?$'
       AND (left(p_pod_uid, 1) = '{') = (right(p_pod_uid, 1) = '}') THEN
        PERFORM pod_sweeper.enqueue(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
                                    p_pod_uid::uuid, p_reason);
    ELSE
        PERFORM pod_sweeper.reject(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
            p_pod_uid, p_reason,
            CASE WHEN p_pod_uid = '' THEN 'pod_uid is empty' ELSE 'pod_uid is not a UID' END);
    END IF;
END;
$$;
REVOKE ALL ON FUNCTION pod_sweeper.enqueue_text_uid(integer, text, bigint, text, text, text, text) FROM PUBLIC;

-- The lag view gains the count of rejects (a column at the end: readers of the others are unaffected),
-- counted up to 1,000: read every 5 s by each replica, it must not walk a table that a broken writer
-- could fill with millions; "1000" means "1,000 or more", and any count above 0 alerts.
CREATE OR REPLACE VIEW pod_sweeper.lag AS
SELECT
    count(*) FILTER (WHERE status = 'pending')                                  AS pending,
    count(*) FILTER (WHERE status IN ('pending', 'claimed') AND next_attempt_at <= now())
                                                                                AS claimable,
    count(*) FILTER (WHERE status = 'pending' AND next_attempt_at > now())      AS backoff,
    count(*) FILTER (WHERE status = 'claimed')                                  AS claimed,
    (SELECT count(*) FROM pod_sweeper.outbox WHERE status = 'dead')             AS dead,
    coalesce(extract(epoch FROM now() - min(enqueued_at)
        FILTER (WHERE status IN ('pending', 'claimed') AND next_attempt_at <= now())), 0)::float8
                                                                                AS oldest_claimable_seconds,
    coalesce(extract(epoch FROM now() - min(enqueued_at)
        FILTER (WHERE status = 'pending' AND next_attempt_at > now())), 0)::float8
                                                                                AS oldest_backoff_seconds,
    coalesce(extract(epoch FROM now() - min(claimed_at)
        FILTER (WHERE status = 'claimed')), 0)::float8                          AS oldest_claim_seconds,
    (SELECT count(*) FROM (SELECT FROM pod_sweeper.rejects LIMIT 1000) AS r)   AS rejected
FROM pod_sweeper.outbox
WHERE status IN ('pending', 'claimed');
