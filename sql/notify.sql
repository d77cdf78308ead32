-- Wake the listening sweepers (the channel is queries.CHANNEL); the payload tells a listener's own
-- ping from a wakeup.
SELECT pg_notify(%(channel)s, %(payload)s)
