-- A replica's clean stop (tasks/loops/presence.py): its row says so at once, not ready, rather than
-- going stale three heartbeats later; the heartbeat of another replica deletes it an hour later.
UPDATE pod_sweeper.replicas
SET stopped_at = now(), seen_at = now(), ready = false, waits = '{}'
WHERE replica = %(replica)s AND cluster = %(cluster)s
