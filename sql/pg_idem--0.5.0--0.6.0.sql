-- pg_idem 0.5.0 -> 0.6.0. Runs inside the transaction of ALTER EXTENSION pg_idem UPDATE: all of
-- it or none of it. Keys, fences, watermarks and grants are untouched.
--
-- 0.5.0 is the release at commit ef35c48. What a fresh install of 0.6.0 has beyond it, natively:
-- idem_version(), the triggers tenant_grants_changed (on idem.tenant_grants) and
-- lift_fence_clock (on idem.keys) with their functions, and idem_distribute dropping those
-- triggers. tests/operations/upgrade.rs updates the released 0.5.0 to this version and compares
-- it with a fresh install, object by object. (The SQL edition builds its update from this
-- script, with sql/edition/updates/pg_idem--0.5.0--0.6.0.sql for its own objects.)
--
-- On a Citus cluster every statement of this script has the whole script for its query text,
-- which a worker refuses for DDL on a distributed table once the script has more than one
-- command (42601): such DDL runs through EXECUTE, and none runs on a table Citus distributes.

-- idem_version(): the version that answers, natively the library's (pg_extension has the SQL
-- objects'). A plain install of the SQL edition has no row in pg_extension: this is how its
-- owner tells which update file to run, and its plain updates refuse another version.
CREATE FUNCTION idem_version() RETURNS text
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_version_wrapper';

COMMENT ON FUNCTION idem_version() IS
'The version of pg_idem that answers: natively its library (pg_extension has its SQL objects''), in the SQL edition its install; an update starts from this version';

-- Any write to idem.tenant_grants (a restore's COPY, a row inserted or deleted by hand), not
-- only idem_grant_tenant's and idem_revoke_tenant's, tells every backend that keeps answers
-- about the grants (sql/tenants.sql). On a Citus cluster whose grants are a reference table
-- already no backend keeps answers (src/sql_api/tenants.rs), and idem_distribute drops the
-- trigger before it distributes the table: none is created there.
CREATE FUNCTION idem.tenant_grants_changed() RETURNS trigger
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_tenant_grants_changed_wrapper';
REVOKE ALL ON FUNCTION idem.tenant_grants_changed() FROM PUBLIC;

DO $update$
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition AS d
                    WHERE d.logicalrelid OPERATOR(pg_catalog.=) 'idem.tenant_grants'::pg_catalog.regclass) THEN
            RETURN;
        END IF;
    END IF;
    CREATE TRIGGER tenant_grants_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idem.tenant_grants
    FOR EACH STATEMENT EXECUTE FUNCTION idem.tenant_grants_changed();
    ALTER TABLE idem.tenant_grants ENABLE ALWAYS TRIGGER tenant_grants_changed;
END
$update$;

-- A fence written to idem.keys by anything but pg_idem's own writes (a restore's COPY) lifts
-- the fence clock to it at once (sql/api.sql). Not on a Citus cluster that distributes
-- idem.keys already: Citus distributes no table with triggers.
CREATE FUNCTION idem.lift_fence_clock() RETURNS trigger
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_lift_fence_clock_wrapper';
REVOKE ALL ON FUNCTION idem.lift_fence_clock() FROM PUBLIC;

DO $update$
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition AS d
                    WHERE d.logicalrelid OPERATOR(pg_catalog.=) 'idem.keys'::pg_catalog.regclass) THEN
            RETURN;
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc AS p
                 JOIN pg_catalog.pg_language AS l ON l.oid OPERATOR(pg_catalog.=) p.prolang
                WHERE p.oid OPERATOR(pg_catalog.=) 'idem.lift_fence_clock()'::pg_catalog.regprocedure
                  AND l.lanname OPERATOR(pg_catalog.=) 'c') THEN
        EXECUTE 'CREATE TRIGGER lift_fence_clock AFTER INSERT OR UPDATE OF fence ON idem.keys
            FOR EACH ROW EXECUTE FUNCTION idem.lift_fence_clock()';
        EXECUTE 'ALTER TABLE idem.keys ENABLE ALWAYS TRIGGER lift_fence_clock';
    END IF;
END
$update$;

-- idem_distribute drops those triggers before Citus distributes idem.keys and
-- idem.tenant_grants (Citus distributes no table with triggers); the rest of it is as it was.
CREATE OR REPLACE FUNCTION idem_distribute(shard_count integer DEFAULT NULL) RETURNS void
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
