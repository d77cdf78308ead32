-- Attached tables whose trigger function predates migration 0008: it still casts a text UID with
-- try_uuid, which skips a malformed UID silently instead of recording it in pod_sweeper.rejects.
-- `attach` again regenerates it.
SELECT a.table_schema, a.table_name
FROM pod_sweeper.attachments AS a
JOIN pg_proc AS p ON p.proname = 'enqueue_' || a.id
JOIN pg_namespace AS n ON n.oid = p.pronamespace AND n.nspname = 'pod_sweeper'
WHERE a.detached_at IS NULL AND p.prosrc LIKE '%try_uuid%'
ORDER BY a.id
