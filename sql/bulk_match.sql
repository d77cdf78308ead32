-- The rows a bulk action (`pod-sweeper retry` or `discard` with filters) matches, a page at a time in
-- id order after %(after)s. A filter passed as NULL (or an empty id list) does not narrow. Nothing is
-- locked: the action's own UPDATE checks each row's status again. One part per status, each through
-- its own index, so a preview reads the rows it may match: the open rows through the claim index, the
-- dead through theirs. Done rows are history the operator asked for, matched by id (the primary key) or
-- by --namespace (cli/bulk.py asks for one of them): a page of them is read in id order from %(after)s,
-- so each statement reads about a page divided by the namespace's share of the history, and the whole
-- action the history once.
WITH filtered AS (
    SELECT id, cluster, pod_namespace, pod_name, status, outcome, attempts, updated_at, last_error
    FROM pod_sweeper.outbox
    WHERE status IN ('pending', 'claimed') AND status = ANY(%(statuses)s::text[])
      AND id > %(after)s AND (cardinality(%(ids)s::bigint[]) = 0 OR id = ANY(%(ids)s::bigint[]))
    UNION ALL
    SELECT id, cluster, pod_namespace, pod_name, status, outcome, attempts, updated_at, last_error
    FROM pod_sweeper.outbox
    WHERE status = 'dead' AND 'dead' = ANY(%(statuses)s::text[])
      AND id > %(after)s AND (cardinality(%(ids)s::bigint[]) = 0 OR id = ANY(%(ids)s::bigint[]))
    UNION ALL
    (SELECT id, cluster, pod_namespace, pod_name, status, outcome, attempts, updated_at, last_error
     FROM pod_sweeper.outbox
     WHERE status = 'done' AND 'done' = ANY(%(statuses)s::text[])
       AND (%(namespace)s::text IS NOT NULL OR cardinality(%(ids)s::bigint[]) > 0)
       AND (%(namespace)s::text IS NULL OR pod_namespace = %(namespace)s::text)
       AND (%(cluster)s::text IS NULL OR cluster = %(cluster)s::text)
       AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s::text)
       AND id > %(after)s AND (cardinality(%(ids)s::bigint[]) = 0 OR id = ANY(%(ids)s::bigint[]))
     ORDER BY id
     LIMIT %(page)s)
)
SELECT id, cluster, pod_namespace, pod_name, status, outcome, attempts, updated_at, last_error
FROM filtered
WHERE (%(cluster)s::text IS NULL OR cluster = %(cluster)s::text)
  AND (%(namespace)s::text IS NULL OR pod_namespace = %(namespace)s::text)
  AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s::text)
  AND (%(contains)s::text IS NULL OR strpos(coalesce(last_error, ''), %(contains)s::text) > 0)
  AND (%(older_than)s::float8 IS NULL OR updated_at < now() - make_interval(secs => %(older_than)s::float8))
ORDER BY id
LIMIT %(page)s
