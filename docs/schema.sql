-- The pod_sweeper schema as the migrations build it (migrations/), generated from PostgreSQL 15
-- by tests/migration/readable.py; do not edit. It is for reading, and run on an empty database it
-- builds the same schema (the migration tier checks both): install with `pod-sweeper migrate`,
-- which also keeps the ledger.

SET check_function_bodies = false;
CREATE SCHEMA pod_sweeper;

-- Tables

CREATE TABLE pod_sweeper.attachments (
    id integer GENERATED ALWAYS AS IDENTITY NOT NULL,
    table_schema text NOT NULL,
    table_name text NOT NULL,
    column_map jsonb NOT NULL,
    attached_at timestamp with time zone DEFAULT now() NOT NULL,
    detached_at timestamp with time zone,
    cluster text DEFAULT 'default'::text NOT NULL,
    CONSTRAINT attachments_pkey PRIMARY KEY (id),
    CONSTRAINT attachments_table_schema_table_name_key UNIQUE (table_schema, table_name)
);

CREATE TABLE pod_sweeper.attempts (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    outbox_id bigint NOT NULL,
    claim_epoch bigint NOT NULL,
    replica text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    duration_ms double precision NOT NULL,
    http_status integer,
    reason text,
    result text NOT NULL,
    error text,
    recorded boolean NOT NULL,
    CONSTRAINT attempts_result_check CHECK ((result = ANY (ARRAY['deleted'::text, 'absent'::text, 'replaced'::text, 'would_delete'::text, 'retry'::text, 'dead'::text, 'handed_back'::text]))),
    CONSTRAINT attempts_pkey PRIMARY KEY (id)
) WITH (fillfactor=100, autovacuum_vacuum_insert_scale_factor=0.05);
COMMENT ON TABLE pod_sweeper.attempts IS 'pod-sweeper: one row per DELETE attempt (see the README)';
CREATE INDEX attempts_outbox ON pod_sweeper.attempts USING btree (outbox_id, id);
CREATE INDEX attempts_recent_deletes ON pod_sweeper.attempts USING btree (started_at) WHERE (result = ANY (ARRAY['deleted'::text, 'would_delete'::text]));

CREATE TABLE pod_sweeper.audit (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    db_role text DEFAULT CURRENT_USER NOT NULL,
    actor text NOT NULL,
    command text NOT NULL,
    arguments jsonb DEFAULT '{}'::jsonb NOT NULL,
    scope text DEFAULT ''::text NOT NULL,
    affected bigint DEFAULT 0 NOT NULL,
    CONSTRAINT audit_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE pod_sweeper.audit IS 'pod-sweeper: every operator action and breaker trip (insert-only for the runtime role)';
CREATE INDEX audit_at ON pod_sweeper.audit USING btree (at);

CREATE TABLE pod_sweeper.breaker (
    tripped_at timestamp with time zone,
    reason text,
    tripped_by text,
    resumed_at timestamp with time zone,
    resumed_by text,
    cluster text DEFAULT 'default'::text NOT NULL,
    CONSTRAINT breaker_pkey PRIMARY KEY (cluster)
);
COMMENT ON TABLE pod_sweeper.breaker IS 'pod-sweeper: the blast-radius breaker of each cluster (tripped_at set: no delete there until resume)';

CREATE TABLE pod_sweeper.holds (
    cluster text NOT NULL,
    pod_namespace text NOT NULL,
    pod_name text NOT NULL,
    pod_uid uuid,
    reason text NOT NULL,
    actor text NOT NULL,
    db_role text DEFAULT CURRENT_USER NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    until timestamp with time zone NOT NULL,
    CONSTRAINT holds_pkey PRIMARY KEY (cluster, pod_namespace, pod_name)
);
COMMENT ON TABLE pod_sweeper.holds IS 'pod-sweeper: pods whose rows are never sent until `until` (kept for forensics, say)';

CREATE TABLE pod_sweeper.large_transactions (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    cluster text NOT NULL,
    enqueued_at timestamp with time zone NOT NULL,
    rows_found integer NOT NULL,
    reason text NOT NULL,
    found_at timestamp with time zone DEFAULT now() NOT NULL,
    found_by text NOT NULL,
    ended_at timestamp with time zone,
    ended_by text,
    ended text,
    CONSTRAINT large_transactions_ended CHECK (((ended_at IS NULL) = (ended IS NULL))),
    CONSTRAINT large_transactions_ended_check CHECK ((ended = ANY (ARRAY['released'::text, 'discarded'::text]))),
    CONSTRAINT large_transactions_pkey PRIMARY KEY (id),
    CONSTRAINT large_transactions_key UNIQUE (cluster, enqueued_at)
);
COMMENT ON TABLE pod_sweeper.large_transactions IS 'pod-sweeper: host transactions the breaker''s transaction rule found; their rows wait until released';
CREATE INDEX large_transactions_open ON pod_sweeper.large_transactions USING btree (cluster) WHERE (ended_at IS NULL);

CREATE TABLE pod_sweeper.outages (
    cluster text NOT NULL,
    replica text NOT NULL,
    since timestamp with time zone NOT NULL,
    reason text NOT NULL,
    probed_at timestamp with time zone NOT NULL,
    CONSTRAINT outages_pkey PRIMARY KEY (cluster, replica)
);
COMMENT ON TABLE pod_sweeper.outages IS 'pod-sweeper: API servers replicas cannot reach now, one row per replica (see probed_at)';

CREATE TABLE pod_sweeper.outbox (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    attachment_id integer NOT NULL,
    sandbox_id text NOT NULL,
    generation bigint NOT NULL,
    pod_namespace text NOT NULL,
    pod_name text NOT NULL,
    pod_uid uuid NOT NULL,
    reason text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    outcome text,
    attempts integer DEFAULT 0 NOT NULL,
    claim_epoch bigint DEFAULT 0 NOT NULL,
    claimed_by text,
    claimed_at timestamp with time zone,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    lease_expires_at timestamp with time zone GENERATED ALWAYS AS (
CASE
    WHEN (status = 'claimed'::text) THEN next_attempt_at
    ELSE NULL::timestamp with time zone
END) STORED,
    last_error text,
    last_http_status integer,
    enqueued_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    done_at timestamp with time zone,
    confirm_after timestamp with time zone,
    confirmed_at timestamp with time zone,
    stuck_at timestamp with time zone,
    cluster text DEFAULT 'default'::text NOT NULL,
    guard_lsn pg_lsn,
    guard_enqueued_at timestamp with time zone,
    CONSTRAINT outbox_claimed_has_owner CHECK (((status <> 'claimed'::text) OR (claimed_by IS NOT NULL))),
    CONSTRAINT outbox_outcome_check CHECK ((outcome = ANY (ARRAY['deleted'::text, 'absent'::text, 'replaced'::text, 'skipped_active'::text, 'would_delete'::text, 'discarded'::text]))),
    CONSTRAINT outbox_outcome_iff_done CHECK (((status = 'done'::text) = (outcome IS NOT NULL))),
    CONSTRAINT outbox_reason_check CHECK ((reason = ANY (ARRAY['retired'::text, 'row_deleted'::text, 'backfill'::text, 'reconciled'::text]))),
    CONSTRAINT outbox_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'claimed'::text, 'done'::text, 'dead'::text]))),
    CONSTRAINT outbox_pkey PRIMARY KEY (id),
    CONSTRAINT outbox_one_row_per_pod UNIQUE (pod_uid)
) WITH (fillfactor=70, autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_threshold=1000, autovacuum_vacuum_insert_scale_factor=0.05, autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_limit=2000);
COMMENT ON TABLE pod_sweeper.outbox IS 'pod-sweeper outbox: one row per pod UID whose generation was retired; see the README';
CREATE INDEX outbox_claimable ON pod_sweeper.outbox USING btree (cluster, next_attempt_at) WHERE (status = ANY (ARRAY['pending'::text, 'claimed'::text]));
CREATE INDEX outbox_dead ON pod_sweeper.outbox USING btree (updated_at) WHERE (status = 'dead'::text);
CREATE INDEX outbox_done_at ON pod_sweeper.outbox USING btree (done_at) WHERE (status = 'done'::text);
CREATE INDEX outbox_done_pod ON pod_sweeper.outbox USING btree (pod_namespace, pod_name) WHERE (status = 'done'::text);
CREATE INDEX outbox_done_sandbox ON pod_sweeper.outbox USING btree (sandbox_id) WHERE (status = 'done'::text);
CREATE INDEX outbox_to_confirm ON pod_sweeper.outbox USING btree (confirm_after) WHERE ((confirm_after IS NOT NULL) AND (confirmed_at IS NULL));

CREATE TABLE pod_sweeper.pauses (
    cluster text NOT NULL,
    pod_namespace text DEFAULT ''::text NOT NULL,
    reason text NOT NULL,
    actor text NOT NULL,
    db_role text DEFAULT CURRENT_USER NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    until timestamp with time zone NOT NULL,
    CONSTRAINT pauses_pkey PRIMARY KEY (cluster, pod_namespace)
);
COMMENT ON TABLE pod_sweeper.pauses IS 'pod-sweeper: scopes whose rows are not claimed until `until` (pod_namespace empty: the whole cluster)';

CREATE TABLE pod_sweeper.reconcile_state (
    last_started_at timestamp with time zone,
    last_finished_at timestamp with time zone,
    last_replica text,
    last_pods_seen integer,
    last_suspects integer,
    last_enqueued integer,
    last_error text,
    cluster text DEFAULT 'default'::text NOT NULL,
    CONSTRAINT reconcile_state_pkey PRIMARY KEY (cluster)
);

CREATE TABLE pod_sweeper.rejects (
    id bigint GENERATED ALWAYS AS IDENTITY NOT NULL,
    attachment_id integer NOT NULL,
    reason text NOT NULL,
    sandbox_id text,
    generation bigint,
    pod_namespace text,
    pod_name text,
    pod_uid text,
    problem text NOT NULL,
    rejected_at timestamp with time zone DEFAULT now() NOT NULL,
    cluster text,
    CONSTRAINT rejects_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE pod_sweeper.rejects IS 'pod-sweeper: retires that named no pod Kubernetes could hold (NULL or empty fields, a malformed UID); nothing was enqueued; delete a row once its cause is fixed';

CREATE TABLE pod_sweeper.replicas (
    replica text NOT NULL,
    host text NOT NULL,
    release text NOT NULL,
    schema_version integer NOT NULL,
    cluster text NOT NULL,
    namespaces text[],
    dry_run boolean NOT NULL,
    dry_run_namespaces text[],
    guard text[],
    rate_limit double precision NOT NULL,
    concurrency integer NOT NULL,
    ready boolean NOT NULL,
    waits jsonb DEFAULT '{}'::jsonb NOT NULL,
    heartbeat_seconds double precision NOT NULL,
    started_at timestamp with time zone NOT NULL,
    seen_at timestamp with time zone NOT NULL,
    stopped_at timestamp with time zone,
    CONSTRAINT replicas_pkey PRIMARY KEY (replica)
) WITH (fillfactor=50);
COMMENT ON TABLE pod_sweeper.replicas IS 'pod-sweeper: one row per replica that ran in the last hour, its settings and state as of seen_at';

CREATE TABLE pod_sweeper.schema_migration_lease (
    version integer NOT NULL,
    holder text NOT NULL,
    renewed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schema_migration_lease_pkey PRIMARY KEY (version)
);

CREATE TABLE pod_sweeper.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    applied_by text DEFAULT CURRENT_USER NOT NULL,
    readable_from integer,
    CONSTRAINT schema_migrations_pkey PRIMARY KEY (version)
);

CREATE TABLE pod_sweeper.suspects (
    pod_uid uuid NOT NULL,
    pod_namespace text NOT NULL,
    pod_name text NOT NULL,
    sandbox_id text NOT NULL,
    generation bigint NOT NULL,
    attachment_id integer NOT NULL,
    why text NOT NULL,
    first_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL,
    cluster text DEFAULT 'default'::text NOT NULL,
    CONSTRAINT suspects_why_check CHECK ((why = ANY (ARRAY['retired'::text, 'no_execution_row'::text]))),
    CONSTRAINT suspects_pkey PRIMARY KEY (pod_uid)
);
COMMENT ON TABLE pod_sweeper.suspects IS 'pod-sweeper reconciliation: labelled pods no active execution row accounts for, in quarantine';

CREATE TABLE pod_sweeper.wakeup (
    armed boolean DEFAULT true NOT NULL,
    changed_at timestamp with time zone DEFAULT now() NOT NULL,
    changed_by text,
    cluster text DEFAULT 'default'::text NOT NULL,
    CONSTRAINT wakeup_pkey PRIMARY KEY (cluster)
);
COMMENT ON TABLE pod_sweeper.wakeup IS 'pod-sweeper: one row; armed = a sweeper sleeps, so retires NOTIFY (migration 0007 says why)';

-- Foreign keys

ALTER TABLE pod_sweeper.attempts ADD CONSTRAINT attempts_outbox_id_fkey FOREIGN KEY (outbox_id) REFERENCES pod_sweeper.outbox(id) ON DELETE CASCADE;
ALTER TABLE pod_sweeper.suspects ADD CONSTRAINT suspects_attachment_id_fkey FOREIGN KEY (attachment_id) REFERENCES pod_sweeper.attachments(id);

-- Functions (the enqueue trigger's among them)

CREATE OR REPLACE FUNCTION pod_sweeper.channel(p_cluster text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT CASE WHEN p_cluster OPERATOR(pg_catalog.=) 'default' THEN 'pod_sweeper'
                  ELSE 'pod_sweeper/' OPERATOR(pg_catalog.||) p_cluster END $function$;

CREATE OR REPLACE FUNCTION pod_sweeper.enqueue(p_attachment_id integer, p_sandbox_id text, p_generation bigint, p_namespace text, p_pod_name text, p_pod_uid uuid, p_reason text)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT pod_sweeper.enqueue(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
                                 p_pod_uid, p_reason, 'default') $function$;

CREATE OR REPLACE FUNCTION pod_sweeper.enqueue(p_attachment_id integer, p_sandbox_id text, p_generation bigint, p_namespace text, p_pod_name text, p_pod_uid uuid, p_reason text, p_cluster text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    v_armed  boolean;
    v_target text;
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
    SELECT w.armed, w.changed_by INTO v_armed, v_target FROM pod_sweeper.wakeup AS w WHERE w.cluster = p_cluster;
    -- A missing row reads as armed: notifying is the safe side.
    IF v_armed IS NOT FALSE OR current_setting('transaction_isolation') <> 'read committed' THEN
        -- Notifications with equal payloads fold within one transaction: one a transaction.
        PERFORM pg_notify(pod_sweeper.channel(p_cluster),
            CASE WHEN v_armed AND v_target IS NOT NULL AND v_target <> ''
                      AND current_setting('transaction_isolation') = 'read committed'
                 THEN 'wake:' || v_target ELSE '' END);
    END IF;
END;
$function$;

CREATE OR REPLACE FUNCTION pod_sweeper.enqueue_text_uid(p_attachment_id integer, p_sandbox_id text, p_generation bigint, p_namespace text, p_pod_name text, p_pod_uid text, p_reason text)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$ SELECT pod_sweeper.enqueue_text_uid(p_attachment_id, p_sandbox_id, p_generation, p_namespace, p_pod_name,
                                          p_pod_uid, p_reason, 'default') $function$;

CREATE OR REPLACE FUNCTION pod_sweeper.enqueue_text_uid(p_attachment_id integer, p_sandbox_id text, p_generation bigint, p_namespace text, p_pod_name text, p_pod_uid text, p_reason text, p_cluster text)
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION pod_sweeper.in_force(p_until timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    SELECT p_until > now()
$function$;

CREATE OR REPLACE FUNCTION pod_sweeper.keeping(p_cluster text, p_namespace text, p_name text, p_uid uuid)
 RETURNS TABLE(kind text, cluster text, pod_namespace text, pod_name text, pod_uid uuid, reason text, actor text, since timestamp with time zone, until timestamp with time zone)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT 'pause', p.cluster, p.pod_namespace, NULL::text, NULL::uuid, p.reason, p.actor, p.since, p.until
    FROM pod_sweeper.pauses AS p
    WHERE p.cluster = p_cluster AND p.pod_namespace IN ('', p_namespace) AND pod_sweeper.in_force(p.until)
    UNION ALL
    SELECT 'hold', h.cluster, h.pod_namespace, h.pod_name, h.pod_uid, h.reason, h.actor, h.since, h.until
    FROM pod_sweeper.holds AS h
    WHERE h.cluster = p_cluster AND h.pod_namespace = p_namespace AND h.pod_name = p_name
      AND pod_sweeper.in_force(h.until) AND (h.pod_uid IS NULL OR h.pod_uid = p_uid)
$function$;

CREATE OR REPLACE FUNCTION pod_sweeper.keeping(p_cluster text, p_namespace text, p_name text, p_uid uuid, p_enqueued_at timestamp with time zone)
 RETURNS TABLE(kind text, cluster text, pod_namespace text, pod_name text, pod_uid uuid, reason text, actor text, since timestamp with time zone, until timestamp with time zone)
 LANGUAGE sql
 STABLE
AS $function$
    SELECT 'pause', p.cluster, p.pod_namespace, NULL::text, NULL::uuid, p.reason, p.actor, p.since, p.until
    FROM pod_sweeper.pauses AS p
    WHERE p.cluster = p_cluster AND p.pod_namespace IN ('', p_namespace) AND pod_sweeper.in_force(p.until)
    UNION ALL
    SELECT 'hold', h.cluster, h.pod_namespace, h.pod_name, h.pod_uid, h.reason, h.actor, h.since, h.until
    FROM pod_sweeper.holds AS h
    WHERE h.cluster = p_cluster AND h.pod_namespace = p_namespace AND h.pod_name = p_name
      AND pod_sweeper.in_force(h.until) AND (h.pod_uid IS NULL OR h.pod_uid = p_uid)
    UNION ALL
    SELECT 'transaction', t.cluster, NULL::text, NULL::text, NULL::uuid,
           format('large transaction %s, begun %s: %s', t.id, t.enqueued_at, t.reason), t.found_by, t.found_at,
           NULL::timestamptz  -- no end of its own: a person ends it
    FROM pod_sweeper.large_transactions AS t
    WHERE t.cluster = p_cluster AND t.enqueued_at = p_enqueued_at AND t.ended_at IS NULL
$function$;

CREATE OR REPLACE FUNCTION pod_sweeper.kept_back_until()
 RETURNS timestamp with time zone
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT '9999-01-01 00:00:00+00'::timestamptz $function$;

CREATE OR REPLACE FUNCTION pod_sweeper.prune_audit(keep interval)
 RETURNS bigint
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    WITH gone AS (
        DELETE FROM pod_sweeper.audit
        WHERE at < now() - greatest(keep, interval '30 days')
        RETURNING 1
    )
    SELECT count(*) FROM gone
$function$;

CREATE OR REPLACE FUNCTION pod_sweeper.record_control_end()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    scope text := 'cluster ' || OLD.cluster;
BEGIN
    IF OLD.until <= now() OR (TG_OP = 'UPDATE' AND NEW.until > now()) THEN
        RETURN NULL;  -- over by itself already, or still in force: not an early end
    END IF;
    IF TG_TABLE_NAME = 'holds' THEN
        scope := scope || ', pod ' || OLD.pod_namespace || '/' || OLD.pod_name;
    ELSIF OLD.pod_namespace <> '' THEN
        scope := scope || ', namespace ' || OLD.pod_namespace;
    END IF;
    INSERT INTO pod_sweeper.audit (db_role, actor, command, arguments, scope, affected)
    VALUES (
        session_user,
        coalesce(nullif(current_setting('pod_sweeper.actor', true), ''), session_user),
        coalesce(nullif(current_setting('pod_sweeper.command', true), ''), 'sql ' || lower(TG_OP)),
        jsonb_build_object('table', TG_TABLE_NAME, 'was_until', OLD.until, 'was_reason', OLD.reason,
                           'was_actor', OLD.actor),
        scope,
        1
    );
    RETURN NULL;
END;
$function$;

CREATE OR REPLACE FUNCTION pod_sweeper.reject(p_attachment_id integer, p_sandbox_id text, p_generation bigint, p_namespace text, p_pod_name text, p_pod_uid text, p_reason text, p_problem text)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    INSERT INTO pod_sweeper.rejects
        (attachment_id, reason, sandbox_id, generation, pod_namespace, pod_name, pod_uid, problem)
    VALUES (p_attachment_id, p_reason, left(p_sandbox_id, 1000), p_generation, left(p_namespace, 1000),
            left(p_pod_name, 1000), left(p_pod_uid, 1000), p_problem);
$function$;

CREATE OR REPLACE FUNCTION pod_sweeper.reject(p_attachment_id integer, p_sandbox_id text, p_generation bigint, p_namespace text, p_pod_name text, p_pod_uid text, p_reason text, p_problem text, p_cluster text)
 RETURNS void
 LANGUAGE sql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
    INSERT INTO pod_sweeper.rejects
        (attachment_id, reason, sandbox_id, generation, pod_namespace, pod_name, pod_uid, problem, cluster)
    VALUES (p_attachment_id, p_reason, left(p_sandbox_id, 1000), p_generation, left(p_namespace, 1000),
            left(p_pod_name, 1000), left(p_pod_uid, 1000), p_problem, left(p_cluster, 1000));
$function$;

CREATE OR REPLACE FUNCTION pod_sweeper.replica_state(r pod_sweeper.replicas)
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
    SELECT CASE
        WHEN r.stopped_at IS NOT NULL THEN 'stopped'
        WHEN r.seen_at < now() - make_interval(secs => 3 * r.heartbeat_seconds) THEN 'stale'
        ELSE 'live'
    END
$function$;

CREATE OR REPLACE FUNCTION pod_sweeper.try_uuid(p_value text)
 RETURNS uuid
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
BEGIN
    RETURN p_value::uuid;
EXCEPTION WHEN invalid_text_representation THEN
    RAISE WARNING 'pod_sweeper: % is not a pod UID; nothing enqueued', p_value;
    RETURN NULL;
END;
$function$;

-- Views (each after the views it reads)

CREATE VIEW pod_sweeper.lag AS
 SELECT count(*) FILTER (WHERE outbox.status = 'pending'::text) AS pending,
    count(*) FILTER (WHERE (outbox.status = ANY (ARRAY['pending'::text, 'claimed'::text])) AND outbox.next_attempt_at <= now()) AS claimable,
    count(*) FILTER (WHERE outbox.status = 'pending'::text AND outbox.next_attempt_at > now()) AS backoff,
    count(*) FILTER (WHERE outbox.status = 'claimed'::text) AS claimed,
    ( SELECT count(*) AS count
           FROM pod_sweeper.outbox outbox_1
          WHERE outbox_1.status = 'dead'::text) AS dead,
    COALESCE(EXTRACT(epoch FROM now() - min(outbox.enqueued_at) FILTER (WHERE (outbox.status = ANY (ARRAY['pending'::text, 'claimed'::text])) AND outbox.next_attempt_at <= now())), 0::numeric)::double precision AS oldest_claimable_seconds,
    COALESCE(EXTRACT(epoch FROM now() - min(outbox.enqueued_at) FILTER (WHERE outbox.status = 'pending'::text AND outbox.next_attempt_at > now())), 0::numeric)::double precision AS oldest_backoff_seconds,
    COALESCE(EXTRACT(epoch FROM now() - min(outbox.claimed_at) FILTER (WHERE outbox.status = 'claimed'::text)), 0::numeric)::double precision AS oldest_claim_seconds,
    ( SELECT count(*) AS count
           FROM ( SELECT
                   FROM pod_sweeper.rejects
                 LIMIT 1000) r) AS rejected
   FROM pod_sweeper.outbox
  WHERE outbox.status = ANY (ARRAY['pending'::text, 'claimed'::text]);

CREATE VIEW pod_sweeper.lag_by_cluster AS
 SELECT outbox.cluster,
    count(*) FILTER (WHERE outbox.status = 'pending'::text) AS pending,
    count(*) FILTER (WHERE (outbox.status = ANY (ARRAY['pending'::text, 'claimed'::text])) AND outbox.next_attempt_at <= now()) AS claimable,
    count(*) FILTER (WHERE outbox.status = 'pending'::text AND outbox.next_attempt_at > now()) AS backoff,
    count(*) FILTER (WHERE outbox.status = 'claimed'::text) AS claimed,
    COALESCE(EXTRACT(epoch FROM now() - min(outbox.enqueued_at) FILTER (WHERE (outbox.status = ANY (ARRAY['pending'::text, 'claimed'::text])) AND outbox.next_attempt_at <= now())), 0::numeric)::double precision AS oldest_claimable_seconds,
    max(outbox.claimed_at) AS last_claimed_at
   FROM pod_sweeper.outbox
  WHERE outbox.status = ANY (ARRAY['pending'::text, 'claimed'::text])
  GROUP BY outbox.cluster;

CREATE VIEW pod_sweeper.summary AS
 SELECT outbox.status,
    outbox.outcome,
    count(*) AS rows,
    min(outbox.enqueued_at) AS oldest_enqueued_at,
    max(outbox.updated_at) AS last_updated_at,
    NULL::timestamp with time zone AS counted_since,
    false AS estimated
   FROM pod_sweeper.outbox
  WHERE outbox.status = ANY (ARRAY['pending'::text, 'claimed'::text])
  GROUP BY outbox.status, outbox.outcome
UNION ALL
 SELECT outbox.status,
    outbox.outcome,
    count(*) AS rows,
    min(outbox.enqueued_at) AS oldest_enqueued_at,
    max(outbox.updated_at) AS last_updated_at,
    NULL::timestamp with time zone AS counted_since,
    false AS estimated
   FROM pod_sweeper.outbox
  WHERE outbox.status = 'dead'::text
  GROUP BY outbox.status, outbox.outcome
UNION ALL
 SELECT outbox.status,
    outbox.outcome,
    count(*) AS rows,
    min(outbox.enqueued_at) AS oldest_enqueued_at,
    max(outbox.updated_at) AS last_updated_at,
    now() - '01:00:00'::interval AS counted_since,
    false AS estimated
   FROM pod_sweeper.outbox
  WHERE outbox.status = 'done'::text AND outbox.done_at > (now() - '01:00:00'::interval)
  GROUP BY outbox.status, outbox.outcome
UNION ALL
 SELECT 'done'::text AS status,
    NULL::text AS outcome,
    c.reltuples::bigint AS rows,
    NULL::timestamp with time zone AS oldest_enqueued_at,
    NULL::timestamp with time zone AS last_updated_at,
    NULL::timestamp with time zone AS counted_since,
    true AS estimated
   FROM pg_class c
  WHERE c.oid = 'pod_sweeper.outbox_done_at'::regclass::oid AND c.reltuples >= 0::double precision;

-- Triggers

CREATE TRIGGER pod_sweeper_trail AFTER DELETE OR UPDATE ON pod_sweeper.holds FOR EACH ROW EXECUTE FUNCTION pod_sweeper.record_control_end();
CREATE TRIGGER pod_sweeper_trail AFTER DELETE OR UPDATE ON pod_sweeper.pauses FOR EACH ROW EXECUTE FUNCTION pod_sweeper.record_control_end();
