-- 0020: the breaker's transaction rule holds the large transaction, not the cluster. Until now one
-- host transaction retiring POD_SWEEPER_BREAKER_TRANSACTION_ROWS (500) or more tripped its cluster's
-- breaker: nothing more was deleted anywhere in that cluster until a person reset it, so a platform
-- deleting one customer's workspace of 600 sandboxes in one transaction stopped every other tenant's
-- sweep, though the rule knew exactly which rows were suspect: they share the transaction's start, which
-- the enqueue writes as their enqueued_at. Now the claim that finds such a transaction records it here
-- (its cluster and that key, its size as found, the rule, which replica) and its rows are kept back as
-- one batch, neither sent nor charged, while every other row of the cluster sweeps on: in the same
-- statement their next_attempt_at is set to pod_sweeper.kept_back_until(), a time no claim, next-due
-- read or discovery reaches, so a claim that began before the transaction was recorded (its snapshot
-- older) still skips them (its FOR UPDATE re-reads a row changed under it), and the claim index's
-- range of due rows never walks them. An on-call releases it (`pod-sweeper release-transaction ID`,
-- after a preview, in the audit trail: its rows are due at once) or discards its rows (`pod-sweeper
-- discard-transaction ID --reason TEXT`). A released transaction is not judged again. The table keeps
-- one row per large transaction found; retention deletes those ended longer ago than the done rows'
-- age (POD_SWEEPER_RETENTION).
--
-- pod_sweeper.keeping gains a form that knows a row's enqueue (p_enqueued_at) and says 'transaction'
-- (with the transaction's id) for a row of a large transaction not ended (released or discarded):
-- `explain` and the reasons rows wait read it. The old form stays, the claim's.
--
-- readable from: 0018 (new tables and functions; nothing the previous release reads or writes changes:
-- its claim skips a kept-back row by its due time, and its own transaction rule trips the cluster's
-- breaker on a large transaction as before)
--
-- Locks: creating a table or a function locks no table.
CREATE TABLE pod_sweeper.large_transactions (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    cluster      text        NOT NULL,
    enqueued_at  timestamptz NOT NULL,  -- the host transaction's start: every row it retired has it
    rows_found   integer     NOT NULL,  -- at least this many rows of it were open when it was found
    reason       text        NOT NULL,  -- the rule and its numbers
    found_at     timestamptz NOT NULL DEFAULT now(),
    found_by     text        NOT NULL,  -- the replica whose claim found it
    ended_at     timestamptz,           -- when an on-call released it, or discarded its rows
    ended_by     text,
    ended        text CHECK (ended IN ('released', 'discarded')),
    CONSTRAINT large_transactions_key UNIQUE (cluster, enqueued_at),
    CONSTRAINT large_transactions_ended CHECK ((ended_at IS NULL) = (ended IS NULL))
);
COMMENT ON TABLE pod_sweeper.large_transactions IS
    'pod-sweeper: host transactions the breaker''s transaction rule found; their rows wait until released';
CREATE INDEX large_transactions_open ON pod_sweeper.large_transactions (cluster) WHERE ended_at IS NULL;

-- When a kept-back row is due: never, for any claim (a finite time, so every client can read it).
CREATE FUNCTION pod_sweeper.kept_back_until() RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT '9999-01-01 00:00:00+00'::timestamptz $$;
COMMENT ON FUNCTION pod_sweeper.kept_back_until() IS
    'pod-sweeper: the due time of a row a large transaction keeps back (no claim reaches it)';

CREATE FUNCTION pod_sweeper.keeping(p_cluster text, p_namespace text, p_name text, p_uid uuid,
                                    p_enqueued_at timestamptz)
RETURNS TABLE (kind text, cluster text, pod_namespace text, pod_name text, pod_uid uuid, reason text,
               actor text, since timestamptz, until timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT 'pause', p.cluster, p.pod_namespace, NULL::text, NULL::uuid, p.reason, p.actor, p.since, p.until
    FROM pod_sweeper.pauses AS p
    WHERE p.cluster = p_cluster AND p.pod_namespace IN ('', p_namespace) AND pod_sweeper.in_force(p.until)
    UNION ALL
    SELECT 'hold', h.cluster, h.pod_namespace, h.pod_name, h.pod_uid, h.reason, h.actor, h.since, h.until
    FROM pod_sweeper.holds AS h
    WHERE h.cluster = p_cluster AND h.pod_namespace = p_namespace AND h.pod_name = p_name
      AND pod_sweeper.in_force(h.until) AND (h.pod_uid IS NULL OR h.pod_uid = p_uid)
    UNION ALL
    SELECT 'transaction', t.cluster, NULL::text, NULL::text, NULL::uuid,
           format('large transaction %s, begun %s: %s', t.id, t.enqueued_at, t.reason), t.found_by, t.found_at,
           NULL::timestamptz  -- no end of its own: a person ends it
    FROM pod_sweeper.large_transactions AS t
    WHERE t.cluster = p_cluster AND t.enqueued_at = p_enqueued_at AND t.ended_at IS NULL
$$;
COMMENT ON FUNCTION pod_sweeper.keeping(text, text, text, uuid, timestamptz) IS
    'pod-sweeper: the pauses, holds and large transactions that keep a row back (none: it may go)';

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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON pod_sweeper.large_transactions TO %s', runtime);
    END LOOP;
END;
$$;
