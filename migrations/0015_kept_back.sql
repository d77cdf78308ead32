-- 0015: the kept-back rule, written once. Which pauses and holds keep a pod's row from being claimed
-- was written in the claim, in the next-due query, in the reconciliation pass (holds only) and in
-- `explain`, each its own way; now each of them reads pod_sweeper.keeping, which returns every pause
-- and hold in force over a pod of a cluster (none: the row may go). A pause of the whole cluster
-- (pod_namespace '') or of the pod's namespace keeps it; a hold of its name keeps it when the hold
-- names no UID or names this one. The blast-radius breaker is not part of it: it keeps no row back, it
-- stops a cluster's claims as a whole (the claim is not made while it is tripped), and `explain` says so
-- apart. A plain SQL function, so the planner inlines it into each statement (the claim's plan is the
-- one the EXPLAIN test holds); it runs with the caller's rights (reading pauses and holds).
--
-- readable from: 0014 (a new function; nothing an older replica reads or writes changes)
--
-- Locks: creating a function locks no table.
CREATE FUNCTION pod_sweeper.keeping(p_cluster text, p_namespace text, p_name text, p_uid uuid)
RETURNS TABLE (kind text, cluster text, pod_namespace text, pod_name text, pod_uid uuid, reason text,
               actor text, since timestamptz, until timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT 'pause', p.cluster, p.pod_namespace, NULL::text, NULL::uuid, p.reason, p.actor, p.since, p.until
    FROM pod_sweeper.pauses AS p
    WHERE p.cluster = p_cluster AND p.pod_namespace IN ('', p_namespace) AND p.until > now()
    UNION ALL
    SELECT 'hold', h.cluster, h.pod_namespace, h.pod_name, h.pod_uid, h.reason, h.actor, h.since, h.until
    FROM pod_sweeper.holds AS h
    WHERE h.cluster = p_cluster AND h.pod_namespace = p_namespace AND h.pod_name = p_name
      AND h.until > now() AND (h.pod_uid IS NULL OR h.pod_uid = p_uid)
$$;
COMMENT ON FUNCTION pod_sweeper.keeping(text, text, text, uuid) IS
    'pod-sweeper: the pauses and holds in force that keep a pod''s row from being claimed (none: it may go)';
