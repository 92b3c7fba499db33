-- Statistics and operator functions. They expose data of every tenant, so PUBLIC cannot call
-- them; members of pg_monitor can.

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

CREATE FUNCTION idem_stats_reset() RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_stats_reset_wrapper';

COMMENT ON FUNCTION idem_stats_reset() IS
'Zero the cumulative counters (false when pg_idem is not preloaded and there are none)';

-- What idem_stats() and idem_tenant_stats() show: this server's keys and counters, or on a
-- Citus coordinator of a distributed idem.keys the sum over every node that answered, each node
-- counting the shards it holds (idem.node_statistics(), src/stats/cluster.rs): a node that does not
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

-- The SECURITY DEFINER functions below are SQL-standard bodies (BEGIN ATOMIC): every function,
-- table and operator they use is bound when they are created, by OID. A body in a string would
-- be parsed again at each call, so a role that controls a schema on the way (renaming public,
-- planting a look-alike idem_counters(), or an overload that makes the name ambiguous) could
-- make the owner's rights run its code, or break every monitor's call.

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

REVOKE ALL ON FUNCTION idem_counters(), idem_tenant_counters(), idem_stats_reset(),
    idem_stats(), idem_tenant_stats(), idem_stalled(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idem_counters(), idem_tenant_counters(), idem_stats(), idem_tenant_stats()
    TO pg_monitor;
