-- The attached tables that can enqueue rows of %(cluster)s: attached for it, or reading each row's
-- cluster from a column. None means no retire of that cluster reaches the outbox: `check` fails on it
-- and the daemon says so.
SELECT format('%%I.%%I', table_schema, table_name) AS name
FROM pod_sweeper.attachments
WHERE detached_at IS NULL AND (cluster = %(cluster)s OR column_map ? 'cluster')
ORDER BY id
