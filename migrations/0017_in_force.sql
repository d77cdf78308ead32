-- 0017: "in force", written once. A pause or a hold is in force while its end (`until`) is still
-- ahead of the database's clock; the claim (through pod_sweeper.keeping), the next-due read, `status`,
-- `explain`, `unpause`, `release`, the controls' own upserts and the DBA's alert query each wrote
-- `until > now()` themselves. Now each reads pod_sweeper.in_force, and keeping() with it. A plain SQL
-- function of one comparison, STABLE, without SET: the planner inlines it where it is called (and
-- keeping() is still inlined into the claim: the EXPLAIN test holds the claim's plan).
--
-- readable from: 0016 (a new function, and keeping() the same rule in other words: nothing an older
-- replica reads or writes changes)
--
-- Locks: creating or replacing a function locks no table.
CREATE FUNCTION pod_sweeper.in_force(p_until timestamptz) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT p_until > now()
$$;
COMMENT ON FUNCTION pod_sweeper.in_force(timestamptz) IS
    'pod-sweeper: whether a pause or a hold ending at p_until is in force now';

CREATE OR REPLACE FUNCTION pod_sweeper.keeping(p_cluster text, p_namespace text, p_name text, p_uid uuid)
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
$$;
