-- At the start of a real (not dry) run of %(cluster)s: its dry run's would_delete rows are work that was
-- never done. Another cluster's rows are its own replicas' (which may still sweep in dry run).
-- Back to pending, attempts reset, with a note of what they were; except in the namespaces still swept
-- in dry run (%(keep)s, POD_SWEEPER_DRY_RUN_NAMESPACES), whose rows stay as they are.
UPDATE pod_sweeper.outbox
SET status = 'pending', outcome = NULL, attempts = 0, next_attempt_at = now(), done_at = NULL,
    last_error = 'reopened: a dry run recorded would_delete', updated_at = now()
WHERE cluster = %(cluster)s AND status = 'done' AND outcome = 'would_delete'
  AND NOT (pod_namespace = ANY(%(keep)s::text[]))
