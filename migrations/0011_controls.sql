-- 0011: an on-call's controls (pauses and holds) and the audit trail of every operator action.
--
-- A pause stops the claims of one scope: a cluster (pod_namespace '': every namespace) or one namespace
-- of a cluster, until `until`; every replica reads it in its claim, so it holds for all of them at
-- once, and it ends by itself. A hold keeps one pod's rows from being sent (pod_uid NULL: whichever
-- pod holds the name) until `until`, for a pod kept for forensics; the reconciliation pass never
-- enqueues a held pod. A row in a paused scope or of a held pod is not claimed, so it is not charged.
CREATE TABLE pod_sweeper.pauses (
    cluster        text        NOT NULL,
    pod_namespace  text        NOT NULL DEFAULT '',  -- '': the whole cluster
    reason         text        NOT NULL,
    actor          text        NOT NULL,
    db_role        text        NOT NULL DEFAULT current_user,
    since          timestamptz NOT NULL DEFAULT now(),
    until          timestamptz NOT NULL,
    PRIMARY KEY (cluster, pod_namespace)
);
COMMENT ON TABLE pod_sweeper.pauses IS
    'pod-sweeper: scopes whose rows are not claimed until `until` (pod_namespace empty: the whole cluster)';

CREATE TABLE pod_sweeper.holds (
    cluster        text        NOT NULL,
    pod_namespace  text        NOT NULL,
    pod_name       text        NOT NULL,
    pod_uid        uuid,                              -- NULL: whichever pod holds the name
    reason         text        NOT NULL,
    actor          text        NOT NULL,
    db_role        text        NOT NULL DEFAULT current_user,
    since          timestamptz NOT NULL DEFAULT now(),
    until          timestamptz NOT NULL,
    PRIMARY KEY (cluster, pod_namespace, pod_name)
);
COMMENT ON TABLE pod_sweeper.holds IS
    'pod-sweeper: pods whose rows are never sent until `until` (kept for forensics, say)';

-- Every operator action, written in the action's own transaction (it commits with it or not at all),
-- and every breaker trip by a replica. Insert-only for the runtime role (`pod-sweeper grant`): it
-- can neither change nor delete a row; retention goes through prune_audit, which keeps at least 30 days.
CREATE TABLE pod_sweeper.audit (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    db_role   text        NOT NULL DEFAULT current_user,
    actor     text        NOT NULL,
    command   text        NOT NULL,
    arguments jsonb       NOT NULL DEFAULT '{}',
    scope     text        NOT NULL DEFAULT '',
    affected  bigint      NOT NULL DEFAULT 0  -- rows the action changed
);
CREATE INDEX audit_at ON pod_sweeper.audit (at);
COMMENT ON TABLE pod_sweeper.audit IS
    'pod-sweeper: every operator action and breaker trip (insert-only for the runtime role)';

-- Retention of the audit trail, for a role that may not delete its rows: runs as the schema's owner,
-- and never deletes a row younger than 30 days, whatever it is asked.
CREATE FUNCTION pod_sweeper.prune_audit(keep interval) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    WITH gone AS (
        DELETE FROM pod_sweeper.audit
        WHERE at < now() - greatest(keep, interval '30 days')
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;
REVOKE ALL ON FUNCTION pod_sweeper.prune_audit(interval) FROM PUBLIC;

-- A runtime role `pod-sweeper grant` made before this migration (a role that may UPDATE the outbox,
-- other than its owner) gets what these tables ask of it, in this same transaction: every claim now
-- reads pod_sweeper.pauses and pod_sweeper.holds, and a breaker trip writes the audit trail, so
-- without these an upgraded replica's claims would fail until `grant --apply` ran again.
DO $$
DECLARE
    runtime regrole;
BEGIN
    FOR runtime IN
        SELECT DISTINCT a.grantee::regrole
        FROM pg_class AS c, aclexplode(c.relacl) AS a
        WHERE c.oid = 'pod_sweeper.outbox'::regclass AND a.privilege_type = 'UPDATE'
          AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON pod_sweeper.pauses, pod_sweeper.holds TO %s', runtime);
        EXECUTE format('GRANT SELECT, INSERT ON pod_sweeper.audit TO %s', runtime);
        EXECUTE format('GRANT EXECUTE ON FUNCTION pod_sweeper.prune_audit(interval) TO %s', runtime);
    END LOOP;
END;
$$;

-- `pod-sweeper discard` ends rows as done with the outcome 'discarded' (kept, like every done row, for
-- the retention window, and in the audit trail for longer). The constraint is replaced NOT VALID: a
-- moment's ACCESS EXCLUSIVE lock, no scan. 0013 validates it in a transaction of its own, which reads
-- the table under SHARE UPDATE EXCLUSIVE and so blocks none of its writers.
ALTER TABLE pod_sweeper.outbox DROP CONSTRAINT outbox_outcome_check;
ALTER TABLE pod_sweeper.outbox ADD CONSTRAINT outbox_outcome_check
    CHECK (outcome IN ('deleted', 'absent', 'replaced', 'skipped_active', 'would_delete', 'discarded')) NOT VALID;
