-- 0009: many clusters, one outbox. Every row names the Kubernetes cluster its pod lives in, and a
-- replica serves one cluster: it claims that cluster's rows only, and is woken by that cluster's
-- retires only. Rows enqueued before this migration, and rows of tables attached without a cluster,
-- belong to the cluster named 'default', the one a replica serves when POD_SWEEPER_CLUSTER is unset:
-- an installation that has one cluster changes nothing.

-- Where a row's cluster comes from: one name for every row of the table, or (column_map's "cluster"
-- role) a column of the host row.
ALTER TABLE pod_sweeper.attachments ADD COLUMN cluster text NOT NULL DEFAULT 'default';

-- A constant default: no table rewrite, whatever the outbox's size.
ALTER TABLE pod_sweeper.outbox ADD COLUMN cluster text NOT NULL DEFAULT 'default';
ALTER TABLE pod_sweeper.rejects ADD COLUMN cluster text;
ALTER TABLE pod_sweeper.suspects ADD COLUMN cluster text NOT NULL DEFAULT 'default';

-- The claim reads one cluster's open rows in due order: the cluster leads the partial index, so a
-- claim costs what that cluster's backlog costs, whatever the other clusters and the history hold.
DROP INDEX pod_sweeper.outbox_claimable;
CREATE INDEX outbox_claimable ON pod_sweeper.outbox (cluster, next_attempt_at)
    WHERE status IN ('pending', 'claimed');

-- The wakeup flag and the reconciliation lease, one row per cluster (a cluster's first replica adds
-- its row). A missing row reads as armed in the enqueue, so a new cluster's retires NOTIFY.
ALTER TABLE pod_sweeper.wakeup DROP CONSTRAINT wakeup_pkey;
ALTER TABLE pod_sweeper.wakeup DROP COLUMN singleton;
ALTER TABLE pod_sweeper.wakeup ADD COLUMN cluster text NOT NULL DEFAULT 'default' PRIMARY KEY;
ALTER TABLE pod_sweeper.reconcile_state DROP CONSTRAINT reconcile_state_pkey;
ALTER TABLE pod_sweeper.reconcile_state DROP COLUMN singleton;
ALTER TABLE pod_sweeper.reconcile_state ADD COLUMN cluster text NOT NULL DEFAULT 'default' PRIMARY KEY;

-- A cluster's NOTIFY channel: 'pod_sweeper' for the default cluster (as before), 'pod_sweeper/NAME'
-- for another, so a replica hears its own cluster's retires and no other's. pod_sweeper.channel and
-- the daemon's queries.channel() say the same.
CREATE FUNCTION pod_sweeper.channel(p_cluster text) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT CASE WHEN p_cluster = 'default' THEN 'pod_sweeper' ELSE 'pod_sweeper/' || p_cluster END $$;

CREATE FUNCTION pod_sweeper.reject(
    p_attachment_id integer,
    p_sandbox_id    text,
    p_generation    bigint,
    p_namespace     text,
    p_pod_name      text,
    p_pod_uid       text,
    p_reason        text,
    p_problem       text,
    p_cluster       text
) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO pod_sweeper.rejects
        (attachment_id, reason, sandbox_id, generation, pod_namespace, pod_name, pod_uid, problem, cluster)
    VALUES (p_attachment_id, p_reason, left(p_sandbox_id, 1000), p_generation, left(p_namespace, 1000),
            left(p_pod_name, 1000), left(p_pod_uid, 1000), p_problem, left(p_cluster, 1000));
$$;
REVOKE ALL ON FUNCTION pod_sweeper.reject(integer, text, bigint, text, text, text, text, text, text) FROM PUBLIC;

-- The enqueue of 0008, with the cluster: the row records it, NOTIFYs its channel while its flag is
-- armed. A NULL, empty or over-long cluster name (a channel name holds 63 bytes) is a reject.
CREATE FUNCTION pod_sweeper.enqueue(
    p_attachment_id integer,
    p_sandbox_id    text,
    p_generation    bigint,
    p_namespace     text,
    p_pod_name      text,
    p_pod_uid       uuid,
    p_reason        text,
    p_cluster       text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_sandbox_id IS NULL OR p_generation IS NULL OR p_pod_uid IS NULL
       OR p_namespace IS NULL OR p_namespace = '' OR p_pod_name IS NULL OR p_pod_name = ''
       OR p_cluster IS NULL OR p_cluster = '' OR octet_length(p_cluster) > 50 THEN
        PERFORM pod_sweeper.reject(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
            p_pod_uid::text, p_reason,
            concat_ws(', ',
                CASE WHEN p_sandbox_id IS NULL THEN 'sandbox_id is NULL' END,
                CASE WHEN p_generation IS NULL THEN 'generation is NULL' END,
                CASE WHEN p_namespace IS NULL THEN 'pod_namespace is NULL'
                     WHEN p_namespace = '' THEN 'pod_namespace is empty' END,
                CASE WHEN p_pod_name IS NULL THEN 'pod_name is NULL'
                     WHEN p_pod_name = '' THEN 'pod_name is empty' END,
                CASE WHEN p_pod_uid IS NULL THEN 'pod_uid is NULL' END,
                CASE WHEN p_cluster IS NULL THEN 'cluster is NULL'
                     WHEN p_cluster = '' THEN 'cluster is empty'
                     WHEN octet_length(p_cluster) > 50 THEN 'cluster is longer than 50 bytes' END),
            p_cluster);
        RETURN;
    END IF;
    INSERT INTO pod_sweeper.outbox AS o
        (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid, reason, cluster)
    VALUES
        (p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name, p_pod_uid, p_reason, p_cluster)
    ON CONFLICT (pod_uid) DO UPDATE
        SET attachment_id = EXCLUDED.attachment_id,
            sandbox_id = EXCLUDED.sandbox_id,
            generation = EXCLUDED.generation,
            pod_namespace = EXCLUDED.pod_namespace,
            pod_name = EXCLUDED.pod_name,
            reason = EXCLUDED.reason,
            cluster = EXCLUDED.cluster,
            status = 'pending',
            outcome = NULL,
            attempts = 0,
            next_attempt_at = now(),
            last_error = NULL,
            last_http_status = NULL,
            enqueued_at = now(),
            updated_at = now(),
            done_at = NULL
        WHERE o.status = 'done' AND o.outcome = 'skipped_active';
    -- The lock first, then the flag, each its own statement: the flag's snapshot follows the lock.
    PERFORM pg_advisory_xact_lock_shared(8101804718561125749);
    -- A missing row reads as armed: notifying is the safe side.
    IF (SELECT w.armed FROM pod_sweeper.wakeup AS w WHERE w.cluster = p_cluster) IS NOT FALSE
       OR current_setting('transaction_isolation') <> 'read committed' THEN
        -- An empty payload: notifications with equal payloads fold within one transaction.
        PERFORM pg_notify(pod_sweeper.channel(p_cluster), '');
    END IF;
END;
$$;
REVOKE ALL ON FUNCTION pod_sweeper.enqueue(integer, text, bigint, text, text, uuid, text, text) FROM PUBLIC;

-- The signatures triggers generated before this migration call: the default cluster.
CREATE OR REPLACE FUNCTION pod_sweeper.enqueue(
    p_attachment_id integer,
    p_sandbox_id    text,
    p_generation    bigint,
    p_namespace     text,
    p_pod_name      text,
    p_pod_uid       uuid,
    p_reason        text
) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pod_sweeper.enqueue(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
                                 p_pod_uid, p_reason, 'default') $$;

CREATE FUNCTION pod_sweeper.enqueue_text_uid(
    p_attachment_id integer,
    p_sandbox_id    text,
    p_generation    bigint,
    p_namespace     text,
    p_pod_name      text,
    p_pod_uid       text,
    p_reason        text,
    p_cluster       text
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_pod_uid ~ '^\{?[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7}\}?$'
       AND (left(p_pod_uid, 1) = '{') = (right(p_pod_uid, 1) = '}') THEN
        PERFORM pod_sweeper.enqueue(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
                                    p_pod_uid::uuid, p_reason, p_cluster);
    ELSE
        PERFORM pod_sweeper.reject(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
            p_pod_uid, p_reason,
            CASE WHEN p_pod_uid = '' THEN 'pod_uid is empty' ELSE 'pod_uid is not a UID' END, p_cluster);
    END IF;
END;
$$;
REVOKE ALL ON FUNCTION pod_sweeper.enqueue_text_uid(integer, text, bigint, text, text, text, text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION pod_sweeper.enqueue_text_uid(
    p_attachment_id integer,
    p_sandbox_id    text,
    p_generation    bigint,
    p_namespace     text,
    p_pod_name      text,
    p_pod_uid       text,
    p_reason        text
) RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$ SELECT pod_sweeper.enqueue_text_uid(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
                                          p_pod_uid, p_reason, 'default') $$;

-- The lag view's numbers for each cluster with open rows (served by the claim index); the lag view
-- itself stays the whole outbox's. A cluster whose rows wait here while nothing claims them has no
-- running sweeper: PodSweeperClusterUnswept.
CREATE VIEW pod_sweeper.lag_by_cluster AS
SELECT
    cluster,
    count(*) FILTER (WHERE status = 'pending')                                  AS pending,
    count(*) FILTER (WHERE status IN ('pending', 'claimed') AND next_attempt_at <= now())
                                                                                AS claimable,
    count(*) FILTER (WHERE status = 'pending' AND next_attempt_at > now())      AS backoff,
    count(*) FILTER (WHERE status = 'claimed')                                  AS claimed,
    coalesce(extract(epoch FROM now() - min(enqueued_at)
        FILTER (WHERE status IN ('pending', 'claimed') AND next_attempt_at <= now())), 0)::float8
                                                                                AS oldest_claimable_seconds,
    max(claimed_at)                                                             AS last_claimed_at
FROM pod_sweeper.outbox
WHERE status IN ('pending', 'claimed')
GROUP BY cluster;
