-- A replica hands the wakeups on (it is stopping, or holds more rows than it can send soon: the shipped
-- rate limit lets one replica send 50 a second): the wakeup flag no longer names it, so retires wake
-- every listening replica (an empty payload, migration 0018) until one of them arms it in its own name
-- (sql/arm.sql); and one NOTIFY now, since this replica may have cleared the flag while it claimed and
-- the others sleep. The flag stays as armed or clear as it was.
-- A saturated replica (%(always)s false) NOTIFYs only when the flag named it: otherwise the retires wake
-- the others already, and one NOTIFY more would make each of them claim for nothing.
WITH unnamed AS (
    UPDATE pod_sweeper.wakeup SET changed_by = NULL
    WHERE cluster = %(cluster)s AND changed_by = %(owner)s
    RETURNING cluster
)
SELECT pg_notify(%(channel)s, '') WHERE %(always)s OR EXISTS (SELECT 1 FROM unnamed)
