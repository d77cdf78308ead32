"""The nearest design issue 51 names, its database side alone, measured beside the shipped outbox (step
``cost``): what an insert-only intake, a claim that changes no indexed column and one statement a turn
would cost the host's primary, before anyone rebuilds the outbox on them.

It is a sketch of the storage, not a sweeper: no Kubernetes (a DELETE costs the primary nothing), one
sweeper (the shipped replicas wake one of themselves per retire), and two simplifications the real
design must pay for and the figures do not include, each named where it is made: the cursor reads the
intake in id order, which a host with concurrent writers commits out of (PgQ cuts its batches by
transaction snapshots for that), and the claim's lease is one slot, where several replicas' batches in
flight need a slot each (a HOT update of a slot per batch all the same).

- **Intake** (``sketch_intake``): the retire's row, inserted by the trigger in the host's transaction
  and never updated; read in order through a BRIN on the id (a few pages, nothing written per row), and
  found by pod and by sandbox through the two B-trees the reads of history need (an entry each per row).
- **Claim and record in one statement a turn** (``TURN``): it records the outcomes of the batch before
  (one narrow row each in ``sketch_done``, insert-only, read through a BRIN on the intake's id), moves
  the cursor past the next batch with its lease (``sketch_cursor``: a HOT update, no indexed column
  changes) and returns that batch with the re-check (the execution still retired) joined in. Under
  steady churn a turn is one transaction a retire; outcomes wait for the next turn at most ``LINGER``
  seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

DDL = """
CREATE TABLE sketch_intake (
    id bigint GENERATED ALWAYS AS IDENTITY,
    sandbox_id text NOT NULL,
    generation bigint NOT NULL,
    pod_namespace text NOT NULL,
    pod_name text NOT NULL,
    pod_uid uuid NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now()
);
-- Summarized as each range fills (autovacuum's work item): unsummarized ranges are read whole.
CREATE INDEX sketch_intake_id ON sketch_intake USING brin (id) WITH (pages_per_range = 4, autosummarize = on);
-- What the on-call's and the DBA's reads of history need (explain by pod, by sandbox: issue 41).
CREATE INDEX sketch_intake_pod ON sketch_intake (pod_namespace, pod_name);
CREATE INDEX sketch_intake_sandbox ON sketch_intake (sandbox_id);
CREATE TABLE sketch_done (
    intake_id bigint NOT NULL,
    done_at timestamptz NOT NULL DEFAULT now(),
    outcome "char" NOT NULL
);
CREATE INDEX sketch_done_id ON sketch_done USING brin (intake_id) WITH (pages_per_range = 4, autosummarize = on);
-- Room on its page for the next version: every update stays on the page (HOT).
CREATE TABLE sketch_cursor (
    shard int PRIMARY KEY,
    position bigint NOT NULL,
    leased_from bigint,
    lease_until timestamptz,
    holder text
) WITH (fillfactor = 20);
INSERT INTO sketch_cursor VALUES (0, 0, NULL, NULL, NULL);
CREATE FUNCTION sketch_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sketch_intake (sandbox_id, generation, pod_namespace, pod_name, pod_uid)
    VALUES (NEW.sandbox_id, NEW.generation, NEW.pod_namespace, NEW.pod_name, NEW.pod_uid);
    -- Only to a sweeper asleep: awake, it holds this lock and comes back for the rows by itself.
    IF pg_try_advisory_xact_lock_shared(51) THEN
        PERFORM pg_notify('sketch', '');
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER sketch_enqueue AFTER UPDATE OF active ON executions
    FOR EACH ROW WHEN (OLD.active AND NOT NEW.active) EXECUTE FUNCTION sketch_enqueue();
"""

TURN = """
WITH recorded AS (
    INSERT INTO sketch_done (intake_id, outcome) SELECT unnest(%(done)s::bigint[]), 'd'
),
cursor AS (
    SELECT position FROM sketch_cursor WHERE shard = 0 FOR UPDATE SKIP LOCKED
),
batch AS (
    SELECT i.id, i.pod_namespace, i.pod_name, i.pod_uid,
           -- the re-check, by the host table's key: a join here was planned as a scan of all of it
           coalesce((SELECT NOT e.active FROM executions AS e
                     WHERE e.sandbox_id = i.sandbox_id AND e.generation = i.generation), true) AS retired
    FROM cursor
    CROSS JOIN LATERAL (SELECT * FROM sketch_intake WHERE id > cursor.position ORDER BY id LIMIT %(batch)s) AS i
),
moved AS (
    UPDATE sketch_cursor AS c
    SET position = b.last, leased_from = c.position, lease_until = now() + interval '60 s', holder = %(holder)s
    FROM (SELECT max(id) AS last FROM batch) AS b
    WHERE c.shard = 0 AND b.last IS NOT NULL
)
SELECT id, retired FROM batch
"""

# The cursor insert-only too (issue 51's snapshot held for hours): a row a turn, never updated, instead of
# the one row ``TURN`` updates. Under a pinned xmin horizon every version of that row stays, and each
# turn's read of it walks them all (a HOT chain while its page has room, then index entries); here the
# position is the newest claim's end, one descent of a B-tree whose entries are all live. Two turns that
# read the same position both insert its start: the unique index lets one through (ON CONFLICT DO
# NOTHING) and the other's batch is not returned.
CLAIMS_DDL = """
CREATE TABLE sketch_claims (
    from_id bigint NOT NULL,
    last_id bigint NOT NULL,
    lease_until timestamptz NOT NULL,
    holder text NOT NULL
);
CREATE UNIQUE INDEX sketch_claims_from ON sketch_claims (from_id);
CREATE INDEX sketch_claims_last ON sketch_claims (last_id);
"""

CLAIMS_TURN = """
WITH recorded AS (
    INSERT INTO sketch_done (intake_id, outcome) SELECT unnest(%(done)s::bigint[]), 'd'
),
cursor AS (
    SELECT coalesce((SELECT last_id FROM sketch_claims ORDER BY last_id DESC LIMIT 1), 0) AS position
),
batch AS (
    SELECT i.id, i.pod_namespace, i.pod_name, i.pod_uid,
           coalesce((SELECT NOT e.active FROM executions AS e
                     WHERE e.sandbox_id = i.sandbox_id AND e.generation = i.generation), true) AS retired
    FROM cursor
    CROSS JOIN LATERAL (SELECT * FROM sketch_intake WHERE id > cursor.position ORDER BY id LIMIT %(batch)s) AS i
),
claimed AS (
    INSERT INTO sketch_claims (from_id, last_id, lease_until, holder)
    SELECT cursor.position, b.last, now() + interval '60 s', %(holder)s
    FROM cursor, (SELECT max(id) AS last FROM batch) AS b
    WHERE b.last IS NOT NULL
    ON CONFLICT (from_id) DO NOTHING
    RETURNING last_id
)
SELECT id, retired FROM batch WHERE EXISTS (SELECT 1 FROM claimed)
"""

LINGER = 0.05  # seconds an awake sweeper lets rows gather between turns (its outcomes wait as long)
POLL = 5.0  # the backstop, as the shipped poll interval


@contextmanager
def sweeper(url: str, *, batch: int = 100, turn: str = TURN) -> Iterator[list[int]]:
    """One sketch sweeper on ``url`` (``DDL`` applied, and ``CLAIMS_DDL`` for ``CLAIMS_TURN``), taking
    turns with ``turn``; yields [rows recorded so far].

    Asleep, it is woken by NOTIFY, which every listening backend reads in a transaction of its own, so a
    retire notifies only a sweeper asleep: awake, the sweeper holds advisory lock 51 (session state: the
    listener's connection is a direct one anyway) and takes a turn every ``LINGER`` while turns find
    rows. A turn that finds none lets the lock go, then takes one more, for the retires that committed
    while it was held and sent nothing; only an empty one puts the sweeper to sleep. A retire whose
    trigger ran while the lock was held but that commits after that last turn began sent nothing either:
    it waits for the backstop (``POLL``). Taking the lock waits for every retiring transaction that
    tested it, so a long host transaction delays the wakeup. Both are the sketch's; the real design
    needs a handshake without them (a second lock each retire holds, waited out before the last turn)."""
    recorded = [0]
    stop = threading.Event()

    def run() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("LISTEN sketch")
            done: list[int] = []
            awake = False
            while not stop.is_set():
                if awake:
                    stop.wait(LINGER)  # rows gather; an awake sweeper is not notified
                else:
                    for _ in conn.notifies(timeout=POLL, stop_after=1):
                        pass
                    conn.execute("SELECT pg_advisory_lock(51)")
                    awake = True
                rows: list[Any] = conn.execute(turn, {"done": done, "batch": batch, "holder": "sketch"}).fetchall()
                recorded[0] += len(done)
                done = [int(row[0]) for row in rows]  # every one deleted: the pods are gone at once here
                if not rows:
                    conn.execute("SELECT pg_advisory_unlock(51)")
                    awake = False
                    rows = conn.execute(turn, {"done": done, "batch": batch, "holder": "sketch"}).fetchall()
                    done = [int(row[0]) for row in rows]
                    if rows:
                        conn.execute("SELECT pg_advisory_lock(51)")
                        awake = True

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield recorded
    finally:
        stop.set()
        thread.join(30)


def bytes_per_done_row(url: str) -> float:
    """The sketch's tables and indexes on disk, over the rows it recorded done."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM sketch_intake, sketch_done, sketch_cursor")
        row = conn.execute(
            "SELECT pg_total_relation_size('sketch_intake') + pg_total_relation_size('sketch_done')"
            " + coalesce(pg_total_relation_size(to_regclass('sketch_claims')), 0),"
            " (SELECT count(*) FROM sketch_done)"
        ).fetchone()
    assert row is not None
    return float(row[0]) / max(1, int(row[1]))
