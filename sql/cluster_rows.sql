-- A replica's cluster gets its wakeup flag row, its reconciliation lease row (migration 0009) and its
-- breaker row (migration 0010), once. The flag starts armed, as the default cluster's did, and names
-- nobody, so retires wake every replica until a listening one arms it in its own name (migration 0018):
-- the first replica may be one that only polls, and a flag naming it would wake nobody.
WITH flag AS (
    INSERT INTO pod_sweeper.wakeup (cluster) VALUES (%(cluster)s) ON CONFLICT DO NOTHING
),
breaker AS (
    INSERT INTO pod_sweeper.breaker (cluster) VALUES (%(cluster)s) ON CONFLICT DO NOTHING
)
INSERT INTO pod_sweeper.reconcile_state (cluster) VALUES (%(cluster)s) ON CONFLICT DO NOTHING
