-- Scaling out with Citus (README, "Scaling out with Citus"). pg_idem's state is distributed by
-- tenant, so that a tenant's keys live on the node that holds the tenant's business rows, and
-- the functions that take a tenant first run on that node. These functions are PL/pgSQL so that
-- pg_idem installs without Citus; each checks for it first.

CREATE FUNCTION idem_distribute(shard_count integer DEFAULT NULL) RETURNS void
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    delegated regprocedure;
    grants idem.tenant_grants[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension AS e WHERE e.extname OPERATOR(pg_catalog.=) 'citus') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'feature_not_supported',
            MESSAGE = 'idem_distribute() needs the citus extension',
            DETAIL = 'Citus is not installed in this database.',
            HINT = 'Run CREATE EXTENSION citus on the coordinator and add the worker nodes first.';
    END IF;
    IF shard_count IS NOT NULL AND (shard_count OPERATOR(pg_catalog.<) 1 OR shard_count OPERATOR(pg_catalog.>) 64000) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'argument "shard_count" must be between 1 and 64000',
            DETAIL = pg_catalog.format('Got %s.', shard_count),
            HINT = 'Pass NULL for citus.shard_count, or the shard count of the tables to colocate with.';
    END IF;
    -- idem.keys first: idem.watermarks and the application's tables colocate with it
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition AS d
                    WHERE d.logicalrelid OPERATOR(pg_catalog.=) 'idem.keys'::pg_catalog.regclass) THEN
        -- the trigger that lifts the fence clock to restored fences goes: Citus distributes
        -- no table with one
        DROP TRIGGER IF EXISTS lift_fence_clock ON idem.keys;
        PERFORM pg_catalog.create_distributed_table('idem.keys', 'tenant',
            shard_count => COALESCE(shard_count, pg_catalog.current_setting('citus.shard_count')::pg_catalog.int4));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition AS d
                    WHERE d.logicalrelid OPERATOR(pg_catalog.=) 'idem.watermarks'::pg_catalog.regclass) THEN
        PERFORM pg_catalog.create_distributed_table('idem.watermarks', 'tenant', colocate_with => 'idem.keys');
    END IF;
    -- Tenant grants are read on whichever node runs a function: a reference table, on every
    -- node. Its rows are taken out and put back through Citus, which writes a role as its name
    -- on each node (role OIDs differ between nodes; the copy of a table's existing rows would
    -- carry the coordinator's OIDs over as they are).
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition AS d
                    WHERE d.logicalrelid OPERATOR(pg_catalog.=) 'idem.tenant_grants'::pg_catalog.regclass) THEN
        LOCK TABLE idem.tenant_grants IN EXCLUSIVE MODE;
        SELECT pg_catalog.array_agg(g) INTO grants FROM idem.tenant_grants AS g;
        DELETE FROM idem.tenant_grants;
        -- with Citus no backend keeps answers about the grants (src/sql_api/tenants.rs), so
        -- the trigger that announces their changes goes: Citus distributes no table with one
        DROP TRIGGER IF EXISTS tenant_grants_changed ON idem.tenant_grants;
        PERFORM pg_catalog.create_reference_table('idem.tenant_grants');
        INSERT INTO idem.tenant_grants SELECT * FROM pg_catalog.unnest(grants);
    END IF;
    -- the functions that take a tenant first run on the node that holds it, in a transaction
    -- block too (force_delegation), so the claim shares the business transaction there
    FOR delegated IN
        SELECT p.oid::pg_catalog.regprocedure
          FROM pg_catalog.pg_depend AS d
          JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) d.objid
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension AS e
                                                   WHERE e.extname OPERATOR(pg_catalog.=) 'pg_idem')
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
           AND p.pronargs OPERATOR(pg_catalog.>=) 1
           AND p.proargnames[1] OPERATOR(pg_catalog.=) 'tenant'
           AND (p.proargmodes IS NULL OR p.proargmodes[1] OPERATOR(pg_catalog.=) 'i')
           AND p.prolang OPERATOR(pg_catalog.=) (SELECT l.oid FROM pg_catalog.pg_language AS l
                                                  WHERE l.lanname OPERATOR(pg_catalog.=) 'c')
           AND p.provolatile OPERATOR(pg_catalog.<>) 'i'
         ORDER BY 1
    LOOP
        PERFORM pg_catalog.create_distributed_function(delegated, 'tenant',
            colocate_with => 'idem.keys', force_delegation => true);
    END LOOP;
END
$$;

COMMENT ON FUNCTION idem_distribute(integer) IS
'On a Citus coordinator: distribute idem.keys and idem.watermarks by tenant and run every tenant-first function on the node holding the tenant; colocate your tables with create_distributed_table(t, ''tenant'', colocate_with => ''idem.keys'')';

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

-- distributing is an administrator's act; the counters are for monitoring
REVOKE ALL ON FUNCTION idem_distribute(integer), idem_cluster_counters() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idem_cluster_counters() TO pg_monitor;
