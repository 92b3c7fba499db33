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

-- The counters idem_stats() and idem_tenant_stats() show: this server's, or on a Citus
-- coordinator of a distributed idem.keys the sum over every node that answered (src/stats.rs).
-- In schema idem: the statistics functions call them with the owner's rights; nobody else can.
CREATE FUNCTION idem.counter_totals(
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
    OUT since timestamptz,
    OUT nodes integer,
    OUT missing_nodes text[]
) RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 1
AS 'MODULE_PATHNAME', 'idem_counter_totals_wrapper';

CREATE FUNCTION idem.tenant_counter_totals(
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
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_tenant_counter_totals_wrapper';

REVOKE ALL ON FUNCTION idem.counter_totals(), idem.tenant_counter_totals() FROM PUBLIC;

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
    OUT purge_total_keys bigint,
    OUT consumed bigint,
    OUT consume_duplicates bigint,
    OUT counters_nodes integer,
    OUT counters_missing_nodes text[]
) RETURNS record
LANGUAGE sql VOLATILE PARALLEL UNSAFE SECURITY DEFINER
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
           purge.last_pass_at, purge.last_pass_keys, purge.total_keys,
           c.consumed, c.consume_duplicates, c.nodes, c.missing_nodes
    FROM keys
    CROSS JOIN idem.counter_totals() AS c
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
    SELECT COALESCE(t.tenant, c.tenant),
           COALESCE(t.in_progress, 0), COALESCE(t.completed, 0), COALESCE(t.failed, 0),
           COALESCE(t.stalled, 0), COALESCE(t.expired, 0), t.oldest_in_progress_at,
           c.claims, c.replays_completed OPERATOR(pg_catalog.+) c.replays_failed, c.in_progress,
           c.mismatches, c.takeovers, c.stale_fences, c.consumed, c.consume_duplicates
    FROM idem.tenant_key_counts AS t
    FULL JOIN idem.tenant_counter_totals() AS c ON c.tenant OPERATOR(pg_catalog.=) t.tenant
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
