-- 0003: who may write the outbox.
-- The enqueue runs inside the host's transactions, as whichever role retired the row. Those writers
-- must not need (or get) any right on our schema, and nobody but the trigger may enqueue: an outbox
-- row is an order to delete a pod. So enqueue is no longer executable by PUBLIC, and the trigger
-- functions that `attach` generates are SECURITY DEFINER (they run as the role that attached them,
-- with a fixed search_path) and are the only callers.
REVOKE ALL ON FUNCTION pod_sweeper.enqueue(integer, text, bigint, text, text, uuid, text) FROM PUBLIC;
ALTER FUNCTION pod_sweeper.enqueue(integer, text, bigint, text, text, uuid, text)
    SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION pod_sweeper.try_uuid(text) SET search_path = pg_catalog, pg_temp;
