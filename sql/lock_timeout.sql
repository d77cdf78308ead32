-- attach, detach and migrate: wait at most this long for a lock, then fail rather than queue
-- the application's writers behind us. Scoped to the transaction.
SELECT set_config('lock_timeout', %(timeout)s, true)
