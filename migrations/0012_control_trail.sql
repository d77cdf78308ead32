-- 0012: no pause or hold ends without a row in the audit trail, whoever ends it.
--
-- `pod-sweeper unpause` and `release` end one through this trigger too: the trigger is the one writer
-- of the trail row for a pause or hold that ends early, so a plain `DELETE FROM pod_sweeper.pauses` (or
-- an UPDATE that moves its end to now or before) by the runtime role, a DBA or anyone else leaves the
-- same row. A command names itself and its operator for the transaction (`set_config(..., true)`,
-- transaction-scoped, so nothing of it outlives the transaction behind a pooler); anything else is
-- recorded as `sql delete` or `sql update` by its database role. A pause or hold already over (its
-- `until` passed) ended by itself at the time its own trail row says, and is not recorded again.
--
-- Locks: CREATE TRIGGER takes SHARE ROW EXCLUSIVE on pauses and holds (two small tables): the claim's
-- reads of them go on, and only the on-call's own commands would wait, for as long as this
-- transaction, which reads no row.
CREATE FUNCTION pod_sweeper.record_control_end() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
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
$$;
REVOKE ALL ON FUNCTION pod_sweeper.record_control_end() FROM PUBLIC;

CREATE TRIGGER pod_sweeper_trail AFTER DELETE OR UPDATE ON pod_sweeper.pauses
    FOR EACH ROW EXECUTE FUNCTION pod_sweeper.record_control_end();
CREATE TRIGGER pod_sweeper_trail AFTER DELETE OR UPDATE ON pod_sweeper.holds
    FOR EACH ROW EXECUTE FUNCTION pod_sweeper.record_control_end();
