-- Record this pass's sighting of suspect pods. A pod seen for the first time, or seen with other
-- labels than before, starts its quarantine now; a pod still a suspect since an earlier pass at
-- least %(quarantine)s seconds ago comes back due (to be confirmed by a fresh GET and database read).
INSERT INTO pod_sweeper.suspects AS s
    (pod_uid, pod_namespace, pod_name, sandbox_id, generation, attachment_id, why, cluster)
SELECT u.*, %(cluster)s FROM unnest(
    %(uids)s::uuid[], %(namespaces)s::text[], %(names)s::text[], %(sandbox_ids)s::text[],
    %(generations)s::bigint[], %(attachment_ids)s::integer[], %(whys)s::text[]
) AS u
ON CONFLICT (pod_uid) DO UPDATE
    SET first_seen_at = CASE
            WHEN (s.sandbox_id, s.generation, s.pod_name) = (EXCLUDED.sandbox_id, EXCLUDED.generation, EXCLUDED.pod_name)
            THEN s.first_seen_at ELSE now() END,
        last_seen_at = now(),
        pod_namespace = EXCLUDED.pod_namespace,
        pod_name = EXCLUDED.pod_name,
        sandbox_id = EXCLUDED.sandbox_id,
        generation = EXCLUDED.generation,
        attachment_id = EXCLUDED.attachment_id,
        why = EXCLUDED.why
RETURNING pod_uid,
    first_seen_at < %(started_at)s AND first_seen_at <= now() - make_interval(secs => %(quarantine)s) AS due
