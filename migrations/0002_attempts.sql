-- 0002: one row per delete attempt, so that a DBA can see why a row went dead without logs.
-- Written by the same statement that records the attempt's result; deleted with its outbox row
-- (ON DELETE CASCADE), so it follows the outbox's retention.
CREATE TABLE pod_sweeper.attempts (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_id    bigint      NOT NULL REFERENCES pod_sweeper.outbox (id) ON DELETE CASCADE,
    claim_epoch  bigint      NOT NULL,
    replica      text        NOT NULL,
    started_at   timestamptz NOT NULL,
    duration_ms  float8      NOT NULL,
    http_status  integer,           -- null: no answer (timeout, connection error)
    reason       text,              -- the API's Status reason (NotFound, Conflict, ...) or the error's kind
    result       text        NOT NULL
        CHECK (result IN ('deleted', 'absent', 'replaced', 'would_delete', 'retry', 'dead', 'handed_back')),
    error        text,
    -- false: the replica had lost its lease by the time it reported, so the result was not recorded
    recorded     boolean     NOT NULL
) WITH (fillfactor = 100, autovacuum_vacuum_insert_scale_factor = 0.05);

CREATE INDEX attempts_outbox ON pod_sweeper.attempts (outbox_id, id);

COMMENT ON TABLE pod_sweeper.attempts IS 'pod-sweeper: one row per DELETE attempt (see the README)';
