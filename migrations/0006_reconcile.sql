-- 0006: the reconciliation backstop. The pass lists labelled pods and looks each one up in the
-- attached tables; a pod whose generation is retired or has no row at all is a suspect. Suspects are
-- kept here, not in memory, so that the quarantine survives restarts and any replica may run the
-- next pass; DBAs read the table to see what the backstop is about to enqueue, and why.
CREATE TABLE pod_sweeper.suspects (
    pod_uid        uuid        PRIMARY KEY,
    pod_namespace  text        NOT NULL,
    pod_name       text        NOT NULL,
    sandbox_id     text        NOT NULL,
    generation     bigint      NOT NULL,
    -- the attachment the outbox row will name: the table holding the retired row, or (no row at all)
    -- the first attachment
    attachment_id  integer     NOT NULL REFERENCES pod_sweeper.attachments (id),
    why            text        NOT NULL CHECK (why IN ('retired', 'no_execution_row')),
    first_seen_at  timestamptz NOT NULL DEFAULT now(),
    last_seen_at   timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE pod_sweeper.suspects IS
    'pod-sweeper reconciliation: labelled pods no active execution row accounts for, in quarantine';

-- One row: the last pass, so that replicas space their passes by the interval between them, and so
-- that `status` and DBAs can see when the backstop last ran and what it found.
CREATE TABLE pod_sweeper.reconcile_state (
    singleton          boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    last_started_at    timestamptz,
    last_finished_at   timestamptz,
    last_replica       text,
    last_pods_seen     integer,
    last_suspects      integer,
    last_enqueued      integer,
    last_error         text
);
INSERT INTO pod_sweeper.reconcile_state DEFAULT VALUES;
