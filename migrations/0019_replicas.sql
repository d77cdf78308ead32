-- 0019: the replicas, known to the database. Until now nothing in the database said who sweeps: which
-- replicas are alive, where, on which release, for which cluster and namespaces, in dry run or not,
-- under which replication guard, ready or waiting and why. `explain` and `status` took the guard's
-- standbys from the reader's own settings (an on-call's shell has none, so a row the guard held read
-- as claimable), and a cluster whose replicas had all stopped showed only as metrics that stop arriving.
-- Now each replica keeps one row here, upserted by its heartbeat (tasks/loops/presence.py, at least
-- every heartbeat_seconds, which it writes too), marked stopped by a clean stop, and every surface reads the
-- settings that decide a row's fate from these rows, never from its reader's environment.
--
-- A row's state is one rule, pod_sweeper.replica_state: 'stopped' once its replica stopped cleanly,
-- 'stale' once it missed three heartbeats (died, froze, or lost the database), else 'live'. A replica's
-- heartbeat deletes the rows an hour past their last heartbeat, so the table never grows with time: one
-- row per replica that ran in the last hour.
--
-- The heartbeat changes only columns no index holds (the key is the replica's id), so each is a HOT
-- update of a small row in a page kept half free (fillfactor 50): no index entry, no page split.
--
-- readable from: 0018 (a new table and a function; an older replica neither reads nor writes them, and
-- the surfaces say that replicas of an older release may be sweeping unseen, docs/operations.md)
--
-- Locks: creating a table or a function locks no table of the host's or ours.
CREATE TABLE pod_sweeper.replicas (
    replica            text             PRIMARY KEY,
    host               text             NOT NULL,
    release            text             NOT NULL,
    schema_version     integer          NOT NULL,  -- the newest migration its release knows
    cluster            text             NOT NULL,
    namespaces         text[],                     -- the namespaces it may delete in; NULL: every one
    dry_run            boolean          NOT NULL,  -- in every namespace
    dry_run_namespaces text[],                     -- in these alone (NULL: none)
    guard              text[],                     -- the standbys its replication guard names; NULL: off
    rate_limit         double precision NOT NULL,  -- DELETEs a second
    concurrency        integer          NOT NULL,
    ready              boolean          NOT NULL,
    waits              jsonb            NOT NULL DEFAULT '{}',  -- reason (core/waits.py) -> what it says
    heartbeat_seconds  double precision NOT NULL,
    started_at         timestamptz      NOT NULL,
    seen_at            timestamptz      NOT NULL,
    stopped_at         timestamptz
) WITH (fillfactor = 50);
COMMENT ON TABLE pod_sweeper.replicas IS
    'pod-sweeper: one row per replica that ran in the last hour, its settings and state as of seen_at';

CREATE FUNCTION pod_sweeper.replica_state(r pod_sweeper.replicas) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN r.stopped_at IS NOT NULL THEN 'stopped'
        WHEN r.seen_at < now() - make_interval(secs => 3 * r.heartbeat_seconds) THEN 'stale'
        ELSE 'live'
    END
$$;
COMMENT ON FUNCTION pod_sweeper.replica_state(pod_sweeper.replicas) IS
    'pod-sweeper: live, stale (three heartbeats missed) or stopped (a clean stop)';

-- A runtime role `pod-sweeper grant` made before this migration gets what the heartbeat needs, in this
-- same transaction (as 0011 did), so that an upgraded replica need not wait for `grant --apply`.
DO $$
DECLARE
    runtime regrole;
BEGIN
    FOR runtime IN
        SELECT DISTINCT a.grantee::regrole
        FROM pg_class AS c, aclexplode(c.relacl) AS a
        WHERE c.oid = 'pod_sweeper.outbox'::regclass AND a.privilege_type = 'UPDATE'
          AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON pod_sweeper.replicas TO %s', runtime);
    END LOOP;
END;
$$;
