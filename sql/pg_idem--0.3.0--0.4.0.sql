-- pg_idem 0.3.0 -> 0.4.0. Runs inside the transaction of ALTER EXTENSION pg_idem UPDATE: all of
-- it or none of it. Keys, fences, watermarks and grants are untouched.

-- 1. The C functions run with the caller's rights. fmgr's SECURITY DEFINER call (the function's
-- settings parsed, a GUC nest level, search_path set and restored, the user switched) was paid on
-- every call, and the engine path needs none of it: the table and index access methods check no
-- privileges and resolve no names. What goes through SQL (the SPI path, the purge, the fence
-- sequence, tenant grants, watermarks) switches to the extension's owner with search_path pinned
-- to pg_catalog, pg_temp in C (src/owner.rs), as these declarations did before.
ALTER FUNCTION idem_complete(text, text, bigint, integer, jsonb) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_fail_final(text, text, bigint, integer, jsonb) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_release(text, text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_heartbeat(text, text, bigint, interval) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_forget(text, text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_purge(integer) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_claim_many(text, text[], text[], interval, interval) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_checkpoint(text, text, bigint, text, jsonb) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_assert_fence(text, text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_claim_seq(text, text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_watermark(text, text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_reset_watermark(text, text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_grant_tenant(regrole, text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_revoke_tenant(regrole, text) SECURITY INVOKER RESET search_path;

-- Functions whose result type changes are dropped and created again below, which would also
-- drop the privileges a DBA set on them: an idem_claim revoked from PUBLIC would silently be
-- executable by PUBLIC again, custom grants on the statistics would be gone. Their ACLs are
-- kept here and put back at the end of this script (a default ACL, NULL, needs nothing; regrole
-- prints a role's name quoted as needed). A plain table in pg_idem's schema, dropped again at the
-- end, not a temporary one: on a Citus cluster the update runs on every node inside a prepared
-- (two-phase) transaction, which PostgreSQL refuses once it touched a temporary object.
CREATE TABLE idem.pg_idem_kept_acl AS
    SELECT n.nspname::text AS schema, p.proname::text AS name,
           pg_catalog.oidvectortypes(p.proargtypes) AS args, p.proacl AS acl
    FROM pg_catalog.pg_proc AS p
    JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
    JOIN pg_catalog.pg_depend AS d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
         AND d.objid OPERATOR(pg_catalog.=) p.oid AND d.deptype OPERATOR(pg_catalog.=) 'e'
    JOIN pg_catalog.pg_extension AS e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
         AND e.extname OPERATOR(pg_catalog.=) 'pg_idem'
    WHERE p.proname OPERATOR(pg_catalog.=) ANY (ARRAY['idem_claim', 'idem_counters', 'idem_tenant_counters',
                                                     'idem_stats', 'idem_tenant_stats', 'idem_cluster_counters'])
      AND p.proacl IS NOT NULL;

-- 2. idem_claim returns a named composite type instead of OUT parameters (same columns, in the
-- same order): a statement that calls it in FROM then copies its result descriptor from the
-- type cache at executor start, where OUT parameters made it parse the function's argument
-- arrays and look up every column's type, each time a prepared statement ran. A function's
-- result type cannot be altered: it is dropped and created again. A view or a SQL-standard
-- function of the application that calls idem_claim makes the DROP fail (nothing is changed
-- then): drop it before ALTER EXTENSION pg_idem UPDATE and create it again after. On a Citus
-- cluster, run SELECT idem_distribute() afterwards, which delegates the new function again.
DROP FUNCTION idem_claim(text, text, text, interval, interval);

CREATE TYPE idem_claim_result AS (
    outcome text,
    fence bigint,
    attempt integer,
    response_code integer,
    response_body jsonb,
    lease_expires_at timestamptz,
    expires_at timestamptz,
    checkpoint_phase text,
    checkpoint_data jsonb
);

COMMENT ON TYPE idem_claim_result IS
'The result of idem_claim: the outcome, and what goes with it (see the function reference)';

CREATE FUNCTION idem_claim(
    tenant text,
    key text,
    request_hash text,
    lease interval DEFAULT NULL,
    ttl interval DEFAULT NULL
) RETURNS idem_claim_result
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_claim_wrapper';

COMMENT ON FUNCTION idem_claim(text, text, text, interval, interval) IS
'Claim an idempotency key inside the business transaction: outcome claimed, completed, failed, in_progress, mismatch or stale_key';

-- 3. Message consumers: idem_consume, idem_consume_many, idem_complete_many (as in
-- sql/consumers.sql).
CREATE FUNCTION idem_consume(
    tenant text,
    key text,
    ttl interval DEFAULT NULL
) RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_consume_wrapper';

COMMENT ON FUNCTION idem_consume(text, text, interval) IS
'Record a message as processed in this transaction: true when it is new (process it now), false when it was processed already; a duplicate in flight waits for its transaction';

CREATE FUNCTION idem_consume_many(
    tenant text,
    keys text[],
    ttl interval DEFAULT NULL
) RETURNS SETOF text
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 100
AS 'MODULE_PATHNAME', 'idem_consume_many_wrapper';

COMMENT ON FUNCTION idem_consume_many(text, text[], interval) IS
'idem_consume for a batch in one round trip: the keys that are new, each once, in input order';

CREATE FUNCTION idem_complete_many(
    tenant text,
    keys text[],
    fences bigint[],
    response_codes integer[],
    response_bodies jsonb[] DEFAULT NULL
) RETURNS TABLE (
    key text,
    expires_at timestamptz
)
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 100
AS 'MODULE_PATHNAME', 'idem_complete_many_wrapper';

COMMENT ON FUNCTION idem_complete_many(text, text[], bigint[], integer[], jsonb[]) IS
'idem_complete for a batch (the i-th fence, code and body for the i-th key) in one round trip; all or nothing: the first refused element raises its error (55000, P0002) and nothing of the batch is stored';

-- 4. Counters of consumed messages (consumed, consume_duplicates) in idem_counters(),
-- idem_tenant_counters() and idem_cluster_counters(); idem_stats() and idem_tenant_stats() sum
-- the keys and counters of every node on a Citus coordinator (idem.statistics(),
-- idem.tenant_statistics()) and idem_stats() says how many nodes answered and which did not.
-- New OUT columns change a function's result type: the functions are dropped (the SQL-standard
-- statistics first: they are bound to the counters) and created again.
DROP FUNCTION idem_tenant_stats();
DROP FUNCTION idem_stats();
DROP FUNCTION idem_cluster_counters();
DROP FUNCTION idem_tenant_counters();
DROP FUNCTION idem_counters();
-- the key counts come from idem.statistics() now (each node counts its own keys): the view
-- that computed them in SQL goes
DROP VIEW idem.tenant_key_counts;

CREATE FUNCTION idem_counters(
    OUT claims bigint,
    OUT replays_completed bigint,
    OUT replays_failed bigint,
    OUT in_progress bigint,
    OUT mismatches bigint,
    OUT takeovers bigint,
    OUT stale_fences bigint,
    OUT stale_keys bigint,
    OUT keys_purged bigint,
    OUT since timestamptz,
    OUT consumed bigint,
    OUT consume_duplicates bigint
) RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL SAFE ROWS 1
AS 'MODULE_PATHNAME', 'idem_counters_wrapper';

COMMENT ON FUNCTION idem_counters() IS
'Cumulative counters of this server since it started or since idem_stats_reset(); NULL without shared_preload_libraries';

CREATE FUNCTION idem_tenant_counters(
    OUT tenant text,
    OUT claims bigint,
    OUT replays_completed bigint,
    OUT replays_failed bigint,
    OUT in_progress bigint,
    OUT mismatches bigint,
    OUT takeovers bigint,
    OUT stale_fences bigint,
    OUT stale_keys bigint,
    OUT consumed bigint,
    OUT consume_duplicates bigint
) RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_tenant_counters_wrapper';

COMMENT ON FUNCTION idem_tenant_counters() IS
'The cumulative counters per tenant (the first 1024 tenants seen; later ones are summed in a row with a NULL tenant)';

-- What idem_stats() and idem_tenant_stats() show: this server's keys and counters, or on a
-- Citus coordinator of a distributed idem.keys the sum over every node that answered, each node
-- counting the shards it holds (idem.node_statistics(), src/stats.rs): a node that does not
-- answer is left out and named instead of failing the query. In schema idem: the statistics
-- functions call them with the owner's rights; nobody else can.
CREATE FUNCTION idem.node_statistics() RETURNS text
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_node_statistics_wrapper';

CREATE FUNCTION idem.statistics(
    OUT keys_in_progress bigint,
    OUT keys_completed bigint,
    OUT keys_failed bigint,
    OUT keys_stalled bigint,
    OUT keys_expired bigint,
    OUT oldest_in_progress_at timestamptz,
    OUT claims bigint,
    OUT replays_completed bigint,
    OUT replays_failed bigint,
    OUT in_progress bigint,
    OUT mismatches bigint,
    OUT takeovers bigint,
    OUT stale_fences bigint,
    OUT stale_keys bigint,
    OUT consumed bigint,
    OUT consume_duplicates bigint,
    OUT keys_purged bigint,
    OUT counters_since timestamptz,
    OUT nodes integer,
    OUT missing_nodes text[]
) RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 1
AS 'MODULE_PATHNAME', 'idem_statistics_wrapper';

CREATE FUNCTION idem.tenant_statistics(
    OUT tenant text,
    OUT keys_in_progress bigint,
    OUT keys_completed bigint,
    OUT keys_failed bigint,
    OUT keys_stalled bigint,
    OUT keys_expired bigint,
    OUT oldest_in_progress_at timestamptz,
    OUT claims bigint,
    OUT replays bigint,
    OUT in_progress bigint,
    OUT mismatches bigint,
    OUT takeovers bigint,
    OUT stale_fences bigint,
    OUT consumed bigint,
    OUT consume_duplicates bigint
) RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_tenant_statistics_wrapper';

REVOKE ALL ON FUNCTION idem.node_statistics(), idem.statistics(), idem.tenant_statistics() FROM PUBLIC;

CREATE FUNCTION idem_stats(
    OUT keys_in_progress bigint,
    OUT keys_completed bigint,
    OUT keys_failed bigint,
    OUT keys_stalled bigint,
    OUT keys_expired bigint,
    OUT oldest_in_progress_at timestamptz,
    OUT claims bigint,
    OUT replays_completed bigint,
    OUT replays_failed bigint,
    OUT in_progress bigint,
    OUT mismatches bigint,
    OUT takeovers bigint,
    OUT stale_fences bigint,
    OUT stale_keys bigint,
    OUT keys_purged bigint,
    OUT counters_since timestamptz,
    OUT purge_last_pass_at timestamptz,
    OUT purge_last_pass_keys bigint,
    OUT purge_total_keys bigint,
    OUT consumed bigint,
    OUT consume_duplicates bigint,
    OUT counters_nodes integer,
    OUT counters_missing_nodes text[]
) RETURNS record
LANGUAGE sql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH purge AS (
        SELECT p.last_pass_at, p.last_pass_keys, p.total_keys
        FROM @extschema@.idem_purge_status() AS p
        WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
    )
    SELECT s.keys_in_progress, s.keys_completed, s.keys_failed, s.keys_stalled, s.keys_expired,
           s.oldest_in_progress_at,
           s.claims, s.replays_completed, s.replays_failed, s.in_progress, s.mismatches, s.takeovers,
           s.stale_fences, s.stale_keys, s.keys_purged, s.counters_since,
           purge.last_pass_at, purge.last_pass_keys, purge.total_keys,
           s.consumed, s.consume_duplicates, s.nodes, s.missing_nodes
    FROM idem.statistics() AS s
    LEFT JOIN purge ON true;
END;

COMMENT ON FUNCTION idem_stats() IS
'Keys by state (stalled: in progress past the lease; expired: awaiting purge), the oldest attempt in progress, the cumulative counters (on a Citus coordinator summed over the nodes that answered: counters_nodes, counters_missing_nodes) and the purge worker''s last pass';

CREATE FUNCTION idem_tenant_stats(
    OUT tenant text,
    OUT keys_in_progress bigint,
    OUT keys_completed bigint,
    OUT keys_failed bigint,
    OUT keys_stalled bigint,
    OUT keys_expired bigint,
    OUT oldest_in_progress_at timestamptz,
    OUT claims bigint,
    OUT replays bigint,
    OUT in_progress bigint,
    OUT mismatches bigint,
    OUT takeovers bigint,
    OUT stale_fences bigint,
    OUT consumed bigint,
    OUT consume_duplicates bigint
) RETURNS SETOF record
LANGUAGE sql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT s.tenant, s.keys_in_progress, s.keys_completed, s.keys_failed, s.keys_stalled,
           s.keys_expired, s.oldest_in_progress_at, s.claims, s.replays, s.in_progress,
           s.mismatches, s.takeovers, s.stale_fences, s.consumed, s.consume_duplicates
    FROM idem.tenant_statistics() AS s
    ORDER BY 1;
END;

COMMENT ON FUNCTION idem_tenant_stats() IS
'Per tenant: keys by state from idem.keys and the cumulative counters (on a Citus coordinator summed over the nodes that answered)';

CREATE FUNCTION idem_cluster_counters(
    OUT nodename text,
    OUT nodeport integer,
    OUT claims bigint,
    OUT replays_completed bigint,
    OUT replays_failed bigint,
    OUT in_progress bigint,
    OUT mismatches bigint,
    OUT takeovers bigint,
    OUT stale_fences bigint,
    OUT stale_keys bigint,
    OUT keys_purged bigint,
    OUT since timestamptz,
    OUT consumed bigint,
    OUT consume_duplicates bigint
) RETURNS SETOF record
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension AS e WHERE e.extname OPERATOR(pg_catalog.=) 'citus') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'feature_not_supported',
            MESSAGE = 'idem_cluster_counters() needs the citus extension',
            DETAIL = 'Citus is not installed in this database.',
            HINT = 'On one server, idem_counters() has them all.';
    END IF;
    -- The command names pg_idem's schema as it is called now, found by its OID: the name
    -- written at CREATE EXTENSION could by now be another schema that its owner planted after
    -- renaming this one, and the command runs with the extension owner's rights.
    -- every node's own counters (shared memory is per node), read there as JSON; a node that
    -- does not answer (or has no counters: pg_idem not preloaded there) has a row of NULLs, so
    -- that a missing node shows instead of a low sum
    RETURN QUERY
    SELECT n.nodename, n.nodeport,
           (c.j OPERATOR(pg_catalog.->>) 'claims')::pg_catalog.int8,
           (c.j OPERATOR(pg_catalog.->>) 'replays_completed')::pg_catalog.int8,
           (c.j OPERATOR(pg_catalog.->>) 'replays_failed')::pg_catalog.int8,
           (c.j OPERATOR(pg_catalog.->>) 'in_progress')::pg_catalog.int8,
           (c.j OPERATOR(pg_catalog.->>) 'mismatches')::pg_catalog.int8,
           (c.j OPERATOR(pg_catalog.->>) 'takeovers')::pg_catalog.int8,
           (c.j OPERATOR(pg_catalog.->>) 'stale_fences')::pg_catalog.int8,
           (c.j OPERATOR(pg_catalog.->>) 'stale_keys')::pg_catalog.int8,
           (c.j OPERATOR(pg_catalog.->>) 'keys_purged')::pg_catalog.int8,
           (c.j OPERATOR(pg_catalog.->>) 'since')::pg_catalog.timestamptz,
           (c.j OPERATOR(pg_catalog.->>) 'consumed')::pg_catalog.int8,
           (c.j OPERATOR(pg_catalog.->>) 'consume_duplicates')::pg_catalog.int8
      FROM pg_catalog.run_command_on_all_nodes(pg_catalog.format(
               'SELECT pg_catalog.row_to_json(c) FROM %I.idem_counters() AS c',
               (SELECT s.nspname FROM pg_catalog.pg_extension AS e
                  JOIN pg_catalog.pg_namespace AS s ON s.oid OPERATOR(pg_catalog.=) e.extnamespace
                 WHERE e.extname OPERATOR(pg_catalog.=) 'pg_idem'))) AS r
      JOIN pg_catalog.pg_dist_node AS n ON n.nodeid OPERATOR(pg_catalog.=) r.nodeid
      -- CASE, not a WHERE: the planner may evaluate the cast before a filter
      CROSS JOIN LATERAL (SELECT CASE WHEN r.success AND r.result OPERATOR(pg_catalog.<>) ''
                                      THEN r.result::pg_catalog.jsonb END AS j) AS c
     ORDER BY n.groupid, n.nodeid;
END
$$;

COMMENT ON FUNCTION idem_cluster_counters() IS
'On a Citus cluster: each node''s cumulative counters (idem_counters() there), one row per node; NULLs for a node that did not answer';

REVOKE ALL ON FUNCTION idem_counters(), idem_tenant_counters(), idem_stats(), idem_tenant_stats(),
    idem_cluster_counters() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idem_counters(), idem_tenant_counters(), idem_stats(), idem_tenant_stats(),
    idem_cluster_counters() TO pg_monitor;

-- The ACLs kept at the top of this script, put back exactly: first every privilege the new
-- function has is taken away, then every one the old function had is given again.
DO $$
DECLARE
    kept record;
    item record;
    function_name text;
BEGIN
    FOR kept IN SELECT * FROM idem.pg_idem_kept_acl LOOP
        function_name := pg_catalog.format('%I.%I(%s)', kept.schema, kept.name, kept.args);
        FOR item IN
            SELECT DISTINCT a.grantee
            FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
            WHERE p.oid OPERATOR(pg_catalog.=) function_name::pg_catalog.regprocedure
        LOOP
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s', function_name,
                CASE WHEN item.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE item.grantee::pg_catalog.regrole::text END);
        END LOOP;
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', function_name);
        FOR item IN SELECT a.grantee, a.is_grantable FROM pg_catalog.aclexplode(kept.acl) AS a LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', function_name,
                CASE WHEN item.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE item.grantee::pg_catalog.regrole::text END,
                CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$$;

DROP TABLE idem.pg_idem_kept_acl;
