-- Name the running command and its operator for the rest of this transaction (is_local: nothing is
-- left on the session, so a pooler may share it): the trail rows the database writes itself, when a
-- pause or a hold ends (migration 0012), carry them.
SELECT set_config('pod_sweeper.actor', %(actor)s::text, true), set_config('pod_sweeper.command', %(command)s::text, true)
