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

-- Tables attached before this migration carry trigger functions that run as the writer; make them
-- definer functions too, in this same transaction, or those writers' retires would fail from now on.
DO $$
DECLARE
    fn regprocedure;
BEGIN
    FOR fn IN
        SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'pod_sweeper' AND p.proname ~ '^enqueue_[0-9]+$'
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', fn);
    END LOOP;
END;
$$;
