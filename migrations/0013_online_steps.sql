-- 0013: the work of 0009-0011 that reads or writes the whole outbox, done online, in steps: no step
-- holds a lock that stops the host's retires (inserts into the outbox) for longer than the migrate lock
-- timeout. Each step can be run again from the start after a failure (`migrate` does, once it is
-- recorded only when every step has run), and each is a no-op on a database that ran the earlier
-- texts of 0009-0011, which did this work in their own transaction.

-- step: alone
-- The claim reads one cluster's open rows in due order: the cluster leads the partial index, so a
-- claim costs what that cluster's backlog costs, whatever the other clusters and the history hold.
-- CONCURRENTLY: the build takes SHARE UPDATE EXCLUSIVE, which lets inserts and updates go on. A build
-- that failed leaves an invalid index behind: dropped first, so a new try builds a valid one.
DROP INDEX CONCURRENTLY IF EXISTS pod_sweeper.outbox_claimable_by_cluster;
-- step: alone
CREATE INDEX CONCURRENTLY outbox_claimable_by_cluster ON pod_sweeper.outbox (cluster, next_attempt_at)
    WHERE status IN ('pending', 'claimed');
-- step: alone
DROP INDEX CONCURRENTLY IF EXISTS pod_sweeper.outbox_claimable;
-- step: in a transaction
-- A moment's ACCESS EXCLUSIVE on the index's table, within the lock timeout.
ALTER INDEX pod_sweeper.outbox_claimable_by_cluster RENAME TO outbox_claimable;
-- step: alone
-- A done row keeps no last_error (0010): the rows done before it, cleared 5,000 at a time, each batch
-- committed on its own (a DO block outside a transaction may COMMIT), so no batch holds row locks long.
DO $$
BEGIN
    LOOP
        UPDATE pod_sweeper.outbox SET last_error = NULL
        WHERE id IN (SELECT id FROM pod_sweeper.outbox
                     WHERE status = 'done' AND last_error IS NOT NULL
                     LIMIT 5000);
        EXIT WHEN NOT FOUND;
        COMMIT;
    END LOOP;
END;
$$;
-- step: in a transaction
-- 0011's constraint, validated: SHARE UPDATE EXCLUSIVE while it reads the table, so writers go on.
ALTER TABLE pod_sweeper.outbox VALIDATE CONSTRAINT outbox_outcome_check;
