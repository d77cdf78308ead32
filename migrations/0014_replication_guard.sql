-- 0014: the replication guard (POD_SWEEPER_REPLICATION_GUARD, opt-in). With asynchronous standbys a
-- failover can lose a retire that had already reached the daemon: the pod deleted, the promoted standby
-- showing the generation active. With the guard on, a row is claimed only once the WAL of its enqueue
-- is flushed on every standby the setting names: before each claim the daemon marks its cluster's open
-- rows with the WAL insert position of that moment (guard_lsn, at or after the commit of every enqueue
-- the mark can see) and the enqueue it vouches for (guard_enqueued_at: a reopen, which sets a new
-- enqueued_at, needs a new mark); the claim takes a row only when its mark is current and every named
-- standby's flush_lsn (pg_stat_replication) has reached it.
--
-- readable from: 0013 (two nullable columns that older replicas neither read nor write: an expand step)
--
-- Locks: ADD COLUMN without a default rewrites nothing: a moment of ACCESS EXCLUSIVE on the outbox.
ALTER TABLE pod_sweeper.outbox ADD COLUMN guard_lsn pg_lsn;
ALTER TABLE pod_sweeper.outbox ADD COLUMN guard_enqueued_at timestamptz;
