-- 0007: a retire NOTIFYs only while a sweeper sleeps, and the retire's insert gets cheaper.
--
-- Why: a transaction with a pending NOTIFY takes a database-wide lock at commit, so every retiring
-- writer of the host application queued behind every other (bench/README.md has the figures). A
-- sweeper that is draining does not need the NOTIFY: it claims again and again until nothing is
-- claimable. So the enqueue now notifies only while pod_sweeper.wakeup.armed is set; a sweeper sets
-- it just before it sleeps and clears it with its next claim.
--
-- The race, and how it is closed. A writer whose enqueue read the flag clear, but which commits after
-- a sweeper's last claim, would be neither heard nor claimed until the poll. So:
--   * the enqueue takes a shared advisory lock (key 8101804718561125749, "podwakeu"; the daemon's
--     outbox.WAKEUP_LOCK_KEY) before it reads the flag, and holds it to its commit;
--   * a sweeper sets the flag only under pg_try_advisory_xact_lock of that key, i.e. only when no
--     writer that may have read the flag clear is still open, and then claims once more before it
--     sleeps.
-- A writer therefore either reads the flag set (and notifies), or committed before the flag was set
-- (and that last claim sees its row). It must read the flag with a snapshot taken after the lock was
-- granted: READ COMMITTED gives each statement of this function a fresh one; REPEATABLE READ and
-- SERIALIZABLE keep the transaction's first, which may predate the arming, so they always notify.
-- The sweeper tries the lock and never waits for it: waiting would queue every new writer behind a
-- writer that left its transaction open. While writers keep it busy, the sweeper polls at a short,
-- growing interval instead of sleeping (see sweeper.py).
CREATE TABLE pod_sweeper.wakeup (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    -- set: some sweeper sleeps and needs a NOTIFY; clear: a sweeper is claiming and will claim again
    armed      boolean     NOT NULL DEFAULT true,
    changed_at timestamptz NOT NULL DEFAULT now(),
    changed_by text
);
-- Armed until a sweeper first claims: with no sweeper ever run, every retire notifies, as before.
INSERT INTO pod_sweeper.wakeup DEFAULT VALUES;
COMMENT ON TABLE pod_sweeper.wakeup IS
    'pod-sweeper: one row; armed = a sweeper sleeps, so retires NOTIFY (migration 0007 says why)';

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

-- The retire's insert, leaner. The foreign key to attachments made every enqueue lock the one
-- attachments row FOR KEY SHARE: with concurrent writers, a new MultiXact per retire. Attachment rows
-- are never deleted (detach only sets detached_at), and a row whose attachment is unknown is left
-- unknown by the re-check (retried, then dead with the reason), never deleted. The index on
-- (attachment_id, sandbox_id, generation) served no statement of ours; each index is one more insert
-- per retire.
ALTER TABLE pod_sweeper.outbox DROP CONSTRAINT outbox_attachment_id_fkey;
DROP INDEX pod_sweeper.outbox_execution;
