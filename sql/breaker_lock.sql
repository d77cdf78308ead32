-- Lock %(cluster)s's breaker row for the claim's transaction, so that one replica at a time spends the
-- cluster's budget. A statement of its own, before breaker_window: under READ COMMITTED a statement
-- that waits for this lock still reads the rest with the snapshot it took before the wait, which
-- misses the claims the other replica committed meanwhile (and so spent the same budget twice).
SELECT 1 FROM pod_sweeper.breaker WHERE cluster = %(cluster)s FOR UPDATE
