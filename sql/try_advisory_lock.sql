-- Take a transaction-scoped advisory lock if it is free (queries.Lock names the keys); never waits.
SELECT pg_try_advisory_xact_lock(%(key)s) AS mine
