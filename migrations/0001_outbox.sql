-- 0001: the outbox, the attachment registry, the enqueue function and the views DBAs read.
-- Applied once, in one transaction, by `pod-sweeper migrate`; never edit it after release: add 0002.

-- Which host tables carry our trigger, and under which column names. The outbox refers to it so that
-- several attached tables can coexist and the re-check knows where to look.
CREATE TABLE pod_sweeper.attachments (
    id            integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_schema  text        NOT NULL,
    table_name    text        NOT NULL,
    -- role -> column name: sandbox_id, generation, pod_namespace, pod_name, pod_uid, active
    column_map    jsonb       NOT NULL,
    attached_at   timestamptz NOT NULL DEFAULT now(),
    detached_at   timestamptz,
    UNIQUE (table_schema, table_name)
);

-- One row per pod UID that a retired execution named. Typed columns only, so that a DBA can read any
-- row with plain SELECT.
--
-- Storage: every row is updated two or three times within seconds of its insert (claim, finalize) and
-- done rows are deleted by retention. fillfactor 70 leaves room on each page so that those updates
-- stay HOT (no index entries for the unindexed columns they touch) and the table bloats less. The
-- autovacuum thresholds are per-table and small: the default 20% scale factor would let dead tuples
-- pile up to millions on a busy table before a vacuum, and the claim's partial index would drag
-- through them; 1% plus a fixed floor keeps it vacuumed continuously, and a cost limit higher than
-- the default lets that vacuum keep up with the churn.
CREATE TABLE pod_sweeper.outbox (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    attachment_id    integer     NOT NULL REFERENCES pod_sweeper.attachments (id),
    sandbox_id       text        NOT NULL,
    generation       bigint      NOT NULL,
    pod_namespace    text        NOT NULL,
    pod_name         text        NOT NULL,
    pod_uid          uuid        NOT NULL,
    reason           text        NOT NULL
        CHECK (reason IN ('retired', 'row_deleted', 'backfill', 'reconciled')),
    status           text        NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'claimed', 'done', 'dead')),
    outcome          text
        CHECK (outcome IN ('deleted', 'absent', 'replaced', 'skipped_active', 'would_delete')),
    -- claims taken, a lease taken over after a crash included; a graceful hand-back is not charged
    attempts         integer     NOT NULL DEFAULT 0,
    -- bumped by every claim; every finalize is fenced on (id, claim_epoch)
    claim_epoch      bigint      NOT NULL DEFAULT 0,
    claimed_by       text,
    claimed_at       timestamptz,
    -- when the row may next be claimed: the end of its backoff while pending, the end of its lease
    -- while claimed. One column so that one partial index serves the whole claim.
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_expires_at timestamptz GENERATED ALWAYS AS
        (CASE WHEN status = 'claimed' THEN next_attempt_at END) STORED,
    last_error       text,
    last_http_status integer,
    enqueued_at      timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    done_at          timestamptz,
    CONSTRAINT outbox_one_row_per_pod UNIQUE (pod_uid),
    CONSTRAINT outbox_outcome_iff_done CHECK ((status = 'done') = (outcome IS NOT NULL)),
    CONSTRAINT outbox_claimed_has_owner CHECK (status <> 'claimed' OR claimed_by IS NOT NULL)
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);

-- The claim index: only open rows, so its size follows the backlog, not the history.
CREATE INDEX outbox_claimable ON pod_sweeper.outbox (next_attempt_at)
    WHERE status IN ('pending', 'claimed');
-- Retention deletes done rows oldest first; dead rows are listed by operators.
CREATE INDEX outbox_done_at ON pod_sweeper.outbox (done_at) WHERE status = 'done';
CREATE INDEX outbox_dead ON pod_sweeper.outbox (updated_at) WHERE status = 'dead';
CREATE INDEX outbox_execution ON pod_sweeper.outbox (attachment_id, sandbox_id, generation);

COMMENT ON TABLE pod_sweeper.outbox IS
    'pod-sweeper outbox: one row per pod UID whose generation was retired; see the README';

-- Called by the per-attachment trigger functions that `pod-sweeper attach` generates. One open row per
-- pod UID: a UID seen again while its row is open or finished changes nothing, except a row that
-- ended skipped_active, which a later retire reopens so that no retire is lost.
CREATE FUNCTION pod_sweeper.enqueue(
    p_attachment_id integer,
    p_sandbox_id    text,
    p_generation    bigint,
    p_namespace     text,
    p_pod_name      text,
    p_pod_uid       uuid,
    p_reason        text
) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO pod_sweeper.outbox AS o
        (attachment_id, sandbox_id, generation, pod_namespace, pod_name, pod_uid, reason)
    VALUES
        (p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name, p_pod_uid, p_reason)
    ON CONFLICT (pod_uid) DO UPDATE
        SET attachment_id = EXCLUDED.attachment_id,
            sandbox_id = EXCLUDED.sandbox_id,
            generation = EXCLUDED.generation,
            pod_namespace = EXCLUDED.pod_namespace,
            pod_name = EXCLUDED.pod_name,
            reason = EXCLUDED.reason,
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
    -- An empty payload: notifications with equal payloads fold within one transaction.
    PERFORM pg_notify('pod_sweeper', '');
END;
$$;

-- A text column that should hold a pod UID: a malformed value enqueues nothing and warns, rather
-- than failing the host application's retire.
CREATE FUNCTION pod_sweeper.try_uuid(p_value text) RETURNS uuid
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN p_value::uuid;
EXCEPTION WHEN invalid_text_representation THEN
    RAISE WARNING 'pod_sweeper: % is not a pod UID; nothing enqueued', p_value;
    RETURN NULL;
END;
$$;

-- One row: what on-call alerts on. Ages are in seconds; 0 when there is no such row.
CREATE VIEW pod_sweeper.lag AS
SELECT
    count(*) FILTER (WHERE status = 'pending')                                  AS pending,
    count(*) FILTER (WHERE status IN ('pending', 'claimed') AND next_attempt_at <= now())
                                                                                AS claimable,
    count(*) FILTER (WHERE status = 'pending' AND next_attempt_at > now())      AS backoff,
    count(*) FILTER (WHERE status = 'claimed')                                  AS claimed,
    (SELECT count(*) FROM pod_sweeper.outbox WHERE status = 'dead')             AS dead,
    coalesce(extract(epoch FROM now() - min(enqueued_at)
        FILTER (WHERE status IN ('pending', 'claimed') AND next_attempt_at <= now())), 0)::float8
                                                                                AS oldest_claimable_seconds,
    coalesce(extract(epoch FROM now() - min(enqueued_at)
        FILTER (WHERE status = 'pending' AND next_attempt_at > now())), 0)::float8
                                                                                AS oldest_backoff_seconds,
    coalesce(extract(epoch FROM now() - min(claimed_at)
        FILTER (WHERE status = 'claimed')), 0)::float8                          AS oldest_claim_seconds
FROM pod_sweeper.outbox
-- Open rows only (the claim index); dead rows are counted through their own partial index above.
WHERE status IN ('pending', 'claimed');

-- Rows by status and outcome, for `pod-sweeper status` and for DBAs.
CREATE VIEW pod_sweeper.summary AS
SELECT status, outcome, count(*) AS rows, min(enqueued_at) AS oldest_enqueued_at,
       max(updated_at) AS last_updated_at
FROM pod_sweeper.outbox
GROUP BY status, outcome;
