-- 0021: the NOTIFY channel's name costs the host's retire nothing. pod_sweeper.channel (migration 0009)
-- carried its own `SET search_path`, and a function with a SET clause is never inlined: every retire
-- that found the wakeup flag armed called it through the executor's save and restore of settings, inside
-- the host's transaction. Without the clause the planner folds it into the enqueue's pg_notify call.
-- Measured on PostgreSQL 15, one retire a transaction, three replicas listening, the flag armed: the
-- host's backend spent 197 µs of CPU on a retire's UPDATE with the trigger, 170 µs with this (the UPDATE
-- alone, no trigger: 47 µs); bench/README.md, issue 51.
--
-- Safe without the clause: its only caller is pod_sweeper.enqueue, which pins the search path itself,
-- and its operators name pg_catalog's own, so a caller's search path decides nothing even if one called
-- it directly.
--
-- readable from: 0018 (the same signature and the same value for every cluster)
--
-- Locks: replacing a function locks no table.
CREATE OR REPLACE FUNCTION pod_sweeper.channel(p_cluster text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN p_cluster OPERATOR(pg_catalog.=) 'default' THEN 'pod_sweeper'
                  ELSE 'pod_sweeper/' OPERATOR(pg_catalog.||) p_cluster END $$;
