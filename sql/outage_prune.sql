-- Retention: outage reports nobody has renewed for an hour (their replica died mid-outage).
DELETE FROM pod_sweeper.outages WHERE probed_at < now() - interval '1 hour'
