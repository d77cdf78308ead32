-- Every attachment's table and column mapping, with the mapped key columns' types, for the re-check.
SELECT a.id, a.table_schema, a.table_name, a.column_map, a.cluster,
       format_type(sid.atttypid, NULL) AS sandbox_id_type,
       format_type(gen.atttypid, NULL) AS generation_type
FROM pod_sweeper.attachments a
LEFT JOIN pg_namespace n ON n.nspname = a.table_schema
LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = a.table_name
LEFT JOIN pg_attribute sid ON sid.attrelid = c.oid AND sid.attname = a.column_map ->> 'sandbox_id'
LEFT JOIN pg_attribute gen ON gen.attrelid = c.oid AND gen.attname = a.column_map ->> 'generation'
