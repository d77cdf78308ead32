-- Whether a table (or view) of that qualified name exists.
SELECT to_regclass(%(name)s) IS NOT NULL AS present
