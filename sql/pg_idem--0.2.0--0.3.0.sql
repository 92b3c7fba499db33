-- pg_idem 0.2.0 -> 0.3.0. Runs inside the transaction of ALTER EXTENSION pg_idem UPDATE: all of
-- it or none of it. Keys, fences, watermarks, grants and the fence sequence are untouched.

-- 1. The tenant columns take the database's default collation instead of "C", as an
-- application's own tenant column has, so that Citus can colocate the application's tables with
-- idem.keys (it requires equal collations of the distribution columns). Default collations are
-- deterministic: equality, and so the primary keys, compare bytes as before; only the order of
-- tenants in the indexes follows the collation, and the indexes are rebuilt here.
-- The view and the SQL-standard functions that read these columns are bound to them: they are
-- dropped first and created again, unchanged, below.
DROP FUNCTION idem_tenant_stats();
DROP FUNCTION idem_stats();
DROP FUNCTION idem_stalled(interval);
DROP FUNCTION idem_tenant_grants();
DROP VIEW idem.tenant_key_counts;

ALTER TABLE idem.keys ALTER COLUMN tenant TYPE text COLLATE pg_catalog."default";
ALTER TABLE idem.watermarks ALTER COLUMN tenant TYPE text COLLATE pg_catalog."default";
ALTER TABLE idem.tenant_grants ALTER COLUMN tenant TYPE text COLLATE pg_catalog."default";

-- The SECURITY DEFINER functions below are SQL-standard bodies (BEGIN ATOMIC): every function,
-- table and operator they use is bound when they are created, by OID. A body in a string would
-- be parsed again at each call, so a role that controls a schema on the way (renaming public,
-- planting a look-alike idem_counters(), or an overload that makes the name ambiguous) could
-- make the owner's rights run its code, or break every monitor's call.
--
-- Key statistics are computed from idem.keys: one scan of the table per query. Expired keys
-- count as absent, whatever their state; stalled keys are in progress past their lease.
-- (A view's operators are bound when it is created, so the caller's search_path never matters.)
CREATE VIEW idem.tenant_key_counts AS
    SELECT k.tenant,
        count(*) FILTER (WHERE k.state = 'p' AND k.expires_at >= n.t) AS in_progress,
        count(*) FILTER (WHERE k.state = 'c' AND k.expires_at >= n.t) AS completed,
        count(*) FILTER (WHERE k.state = 'f' AND k.expires_at >= n.t) AS failed,
        count(*) FILTER (WHERE k.state = 'p' AND k.expires_at >= n.t AND k.lease_expires_at < n.t) AS stalled,
        count(*) FILTER (WHERE k.expires_at < n.t) AS expired,
        min(k.claimed_at) FILTER (WHERE k.state = 'p' AND k.expires_at >= n.t) AS oldest_in_progress_at
    FROM idem.keys AS k, (SELECT pg_catalog.clock_timestamp() AS t) AS n
    GROUP BY k.tenant;

REVOKE ALL ON idem.tenant_key_counts FROM PUBLIC;

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
    OUT purge_total_keys bigint
) RETURNS record
LANGUAGE sql VOLATILE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    WITH keys AS (
        SELECT COALESCE(sum(t.in_progress), 0)::bigint AS in_progress,
               COALESCE(sum(t.completed), 0)::bigint AS completed,
               COALESCE(sum(t.failed), 0)::bigint AS failed,
               COALESCE(sum(t.stalled), 0)::bigint AS stalled,
               COALESCE(sum(t.expired), 0)::bigint AS expired,
               min(t.oldest_in_progress_at) AS oldest
        FROM idem.tenant_key_counts AS t
    ),
    purge AS (
        SELECT p.last_pass_at, p.last_pass_keys, p.total_keys
        FROM @extschema@.idem_purge_status() AS p
        WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
    )
    SELECT keys.in_progress, keys.completed, keys.failed, keys.stalled, keys.expired, keys.oldest,
           c.claims, c.replays_completed, c.replays_failed, c.in_progress, c.mismatches, c.takeovers,
           c.stale_fences, c.stale_keys, c.keys_purged, c.since,
           purge.last_pass_at, purge.last_pass_keys, purge.total_keys
    FROM keys
    CROSS JOIN @extschema@.idem_counters() AS c
    LEFT JOIN purge ON true;
END;

COMMENT ON FUNCTION idem_stats() IS
'Keys by state (stalled: in progress past the lease; expired: awaiting purge), the oldest attempt in progress, the cumulative counters and the purge worker''s last pass';

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
    OUT stale_fences bigint
) RETURNS SETOF record
LANGUAGE sql VOLATILE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT COALESCE(t.tenant, c.tenant),
           COALESCE(t.in_progress, 0), COALESCE(t.completed, 0), COALESCE(t.failed, 0),
           COALESCE(t.stalled, 0), COALESCE(t.expired, 0), t.oldest_in_progress_at,
           c.claims, c.replays_completed OPERATOR(pg_catalog.+) c.replays_failed, c.in_progress,
           c.mismatches, c.takeovers, c.stale_fences
    FROM idem.tenant_key_counts AS t
    FULL JOIN @extschema@.idem_tenant_counters() AS c ON c.tenant OPERATOR(pg_catalog.=) t.tenant
    ORDER BY 1;
END;

COMMENT ON FUNCTION idem_tenant_stats() IS
'Per tenant: keys by state from idem.keys and the cumulative counters from shared memory';

CREATE FUNCTION idem_stalled(older_than interval DEFAULT '0')
RETURNS TABLE (
    tenant text,
    key text,
    fence bigint,
    attempt integer,
    claimed_at timestamptz,
    lease_expires_at timestamptz,
    stalled_for interval,
    checkpoint_phase text
)
LANGUAGE plpgsql VOLATILE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- PL/pgSQL, not a SQL-standard body like its neighbours: Citus cannot plan a query over a
-- distributed idem.keys that uses a SQL function's parameter, and PL/pgSQL passes older_than as
-- a bound value. Every name is qualified and none is in a schema another role controls.
AS $$
BEGIN
    RETURN QUERY
    SELECT k.tenant, k.key, k.fence, k.attempt, k.claimed_at, k.lease_expires_at,
           pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) k.lease_expires_at, k.checkpoint_phase
    FROM idem.keys AS k
    WHERE k.state OPERATOR(pg_catalog.=) 'p'
      AND k.lease_expires_at OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) older_than)
      AND k.expires_at OPERATOR(pg_catalog.>=) pg_catalog.clock_timestamp()
    ORDER BY k.lease_expires_at;
END
$$;

COMMENT ON FUNCTION idem_stalled(interval) IS
'Keys in progress whose lease passed more than older_than ago (and that have not expired), oldest first, with their fence so a sweeper can finish or release them';

REVOKE ALL ON FUNCTION idem_stats(), idem_tenant_stats(), idem_stalled(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idem_stats(), idem_tenant_stats() TO pg_monitor;

CREATE FUNCTION idem_tenant_grants(OUT role regrole, OUT tenant text) RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT g.role, g.tenant FROM idem.tenant_grants AS g ORDER BY g.tenant, g.role::pg_catalog.text;
END;

COMMENT ON FUNCTION idem_tenant_grants() IS
'Every grant of idem_grant_tenant, by tenant';

REVOKE ALL ON FUNCTION idem_tenant_grants() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idem_tenant_grants() TO pg_monitor;

-- 2. New: idem_distribute() and idem_cluster_counters() (sql/cluster.sql).
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
    OUT since timestamptz
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
           (c.j OPERATOR(pg_catalog.->>) 'since')::pg_catalog.timestamptz
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
