-- A replica's cluster gets its wakeup flag row and its reconciliation lease row, once (migration 0009:
-- one of each per cluster). The flag starts armed, as the default cluster's did.
WITH flag AS (
    INSERT INTO pod_sweeper.wakeup (cluster, changed_by) VALUES (%(cluster)s, %(owner)s) ON CONFLICT DO NOTHING
)
INSERT INTO pod_sweeper.reconcile_state (cluster) VALUES (%(cluster)s) ON CONFLICT DO NOTHING
