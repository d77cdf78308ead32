-- This replica's API server answers again (and, at start, a row a previous process of the same replica
-- left behind): its outage is over.
DELETE FROM pod_sweeper.outages WHERE cluster = %(cluster)s AND replica = %(replica)s
