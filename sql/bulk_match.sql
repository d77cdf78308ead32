-- The rows a bulk action (`pod-sweeper retry` or `discard` with filters) matches, a page at a time in
-- id order after %(after)s. A filter passed as NULL (or an empty id list) does not narrow. Nothing is
-- locked: the action's own UPDATE checks each row's status again.
SELECT id, cluster, pod_namespace, pod_name, status, outcome, attempts, updated_at, last_error
FROM pod_sweeper.outbox
WHERE status = ANY(%(statuses)s::text[])
  AND (%(cluster)s::text IS NULL OR cluster = %(cluster)s::text)
  AND (%(namespace)s::text IS NULL OR pod_namespace = %(namespace)s::text)
  AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s::text)
  AND (%(contains)s::text IS NULL OR strpos(coalesce(last_error, ''), %(contains)s::text) > 0)
  AND (%(older_than)s::float8 IS NULL OR updated_at < now() - make_interval(secs => %(older_than)s::float8))
  AND (cardinality(%(ids)s::bigint[]) = 0 OR id = ANY(%(ids)s::bigint[]))
  AND id > %(after)s
ORDER BY id
LIMIT %(page)s
