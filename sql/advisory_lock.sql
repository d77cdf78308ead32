-- Wait for a transaction-scoped advisory lock (queries.Lock names the keys); released at commit.
SELECT pg_advisory_xact_lock(%(key)s)
