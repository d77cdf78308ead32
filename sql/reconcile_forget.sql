-- Pods that are no longer suspects: seen active, gone, replaced, or changed since. A later sighting
-- starts a new quarantine.
DELETE FROM pod_sweeper.suspects WHERE cluster = %(cluster)s AND pod_uid = ANY(%(uids)s::uuid[])
