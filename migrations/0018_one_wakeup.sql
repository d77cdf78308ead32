-- 0018: a retire wakes one sleeping replica, not every one. Until now each retire that found the wakeup
-- flag armed sent an empty NOTIFY, which woke every listening replica of the cluster; each then
-- claimed, and all but one found nothing (SKIP LOCKED): at 100 retires a second with three replicas,
-- three claims a retire (bench `cost`). Now the NOTIFY's payload names the replica that armed the
-- flag (`wakeup.changed_by`, as sql/arm.sql writes it): 'wake:REPLICA'. A replica's listener claims
-- on its own name or an empty payload and passes over the others. The flag names the last replica to
-- arm it; one that finds, on a poll, rows nobody claimed (the named one stopped, crashed or lost its
-- listener) takes it over (sql/arm.sql), and one that stops or holds more than it can send soon
-- clears its name (sql/wakeup_hand_on.sql).
-- An empty payload still wakes every replica: a missing flag row, a flag that names nobody, and a
-- transaction above READ COMMITTED (whose read of the flag may be stale).
--
-- readable from: 0017 (the same signature and the same rows; an older replica's listener claims on
-- any payload, as before)
--
-- Locks: replacing a function locks no table.
CREATE OR REPLACE FUNCTION pod_sweeper.enqueue(
    p_attachment_id integer,
    p_sandbox_id    text,
    p_generation    bigint,
    p_namespace     text,
    p_pod_name      text,
    p_pod_uid       uuid,
    p_reason        text,
    p_cluster       text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_armed  boolean;
    v_target text;
BEGIN
    IF p_sandbox_id IS NULL OR p_generation IS NULL OR p_pod_uid IS NULL
       OR p_namespace IS NULL OR p_namespace = '' OR p_pod_name IS NULL OR p_pod_name = ''
       OR p_cluster IS NULL OR p_cluster = '' OR octet_length(p_cluster) > 50 THEN
        PERFORM pod_sweeper.reject(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
            p_pod_uid::text, p_reason,
            concat_ws(', ',
                CASE WHEN p_sandbox_id IS NULL THEN 'sandbox_id is NULL' END,
                CASE WHEN p_generation IS NULL THEN 'generation is NULL' END,
                CASE WHEN p_namespace IS NULL THEN 'pod_namespace is NULL'
                     WHEN p_namespace = '' THEN 'pod_namespace is empty' END,
                CASE WHEN p_pod_name IS NULL THEN 'pod_name is NULL'
                     WHEN p_pod_name = '' THEN 'pod_name is empty' END,
                CASE WHEN p_pod_uid IS NULL THEN 'pod_uid is NULL' END,
                CASE WHEN p_cluster IS NULL THEN 'cluster is NULL'
                     WHEN p_cluster = '' THEN 'cluster is empty'
                     WHEN octet_length(p_cluster) > 50 THEN 'cluster is longer than 50 bytes' END),
            p_cluster);
        RETURN;
    END IF;
    INSERT INTO pod_sweeper.outbox AS o
        (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid, reason, cluster)
    VALUES
        (p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name, p_pod_uid, p_reason, p_cluster)
    ON CONFLICT (pod_uid) DO UPDATE
        SET attachment_id = EXCLUDED.attachment_id,
            sandbox_id = EXCLUDED.sandbox_id,
            generation = EXCLUDED.generation,
            pod_namespace = EXCLUDED.pod_namespace,
            pod_name = EXCLUDED.pod_name,
            reason = EXCLUDED.reason,
            cluster = EXCLUDED.cluster,
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
    SELECT w.armed, w.changed_by INTO v_armed, v_target FROM pod_sweeper.wakeup AS w WHERE w.cluster = p_cluster;
    -- A missing row reads as armed: notifying is the safe side.
    IF v_armed IS NOT FALSE OR current_setting('transaction_isolation') <> 'read committed' THEN
        -- Notifications with equal payloads fold within one transaction: one a transaction.
        PERFORM pg_notify(pod_sweeper.channel(p_cluster),
            CASE WHEN v_armed AND v_target IS NOT NULL AND v_target <> ''
                      AND current_setting('transaction_isolation') = 'read committed'
                 THEN 'wake:' || v_target ELSE '' END);
    END IF;
END;
$$;
REVOKE ALL ON FUNCTION pod_sweeper.enqueue(integer, text, bigint, text, text, uuid, text, text) FROM PUBLIC;
