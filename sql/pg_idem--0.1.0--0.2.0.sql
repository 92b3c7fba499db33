-- pg_idem 0.1.0 -> 0.2.0. Runs inside the transaction of ALTER EXTENSION pg_idem UPDATE: all of
-- it or none of it. Keys, fences, watermarks and the fence sequence are untouched.

-- 0.2.0 refuses databases that are not UTF8 (0.1.0 accepted them, and mishandled non-ASCII keys
-- and request bodies there).
-- pg_idem reads every text argument and jsonb string as UTF-8 (tenants, keys, request bodies:
-- hashes, lock identities, length limits). In another server encoding those bytes mean
-- something else, and two different requests could hash alike, so refuse plainly instead.
DO $$
BEGIN
    IF pg_catalog.getdatabaseencoding() OPERATOR(pg_catalog.<>) 'UTF8' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'feature_not_supported',
            MESSAGE = 'pg_idem requires a database with encoding UTF8',
            DETAIL = pg_catalog.format('Database %I has encoding %s.',
                pg_catalog.current_database(), pg_catalog.getdatabaseencoding()),
            HINT = 'Create pg_idem in a database created with ENCODING ''UTF8'' (for example from template0); '
                'pg_idem hashes and compares keys and request bodies as UTF-8.';
    END IF;
END
$$;

-- Tenants a role may act on, used when pg_idem.tenant_grants is on (see idem_grant_tenant).
-- regrole, so that pg_dump writes role names and a restore maps them to the new roles' OIDs.
CREATE TABLE idem.tenant_grants (
    role   regrole NOT NULL,
    tenant text COLLATE "C" NOT NULL
);
-- regrole has no btree operator class of its own; oid's applies (the two are binary-compatible)
CREATE UNIQUE INDEX tenant_grants_pkey ON idem.tenant_grants (tenant, role pg_catalog.oid_ops);
ALTER TABLE idem.tenant_grants ADD CONSTRAINT tenant_grants_pkey PRIMARY KEY USING INDEX tenant_grants_pkey;

COMMENT ON TABLE idem.tenant_grants IS 'pg_idem tenants granted to roles, enforced when pg_idem.tenant_grants is on';

REVOKE ALL ON idem.tenant_grants FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('idem.tenant_grants', '');

-- The SECURITY DEFINER statistics functions become SQL-standard bodies, bound by OID when they
-- are created (0.1.0's string bodies resolved idem_counters() and idem_purge_status() by name at
-- every call, through a schema the database owner controls). Comments and grants are kept.
CREATE OR REPLACE FUNCTION idem_stats(
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

CREATE OR REPLACE FUNCTION idem_tenant_stats(
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

CREATE OR REPLACE FUNCTION idem_stalled(older_than interval DEFAULT '0')
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
LANGUAGE sql VOLATILE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT k.tenant, k.key, k.fence, k.attempt, k.claimed_at, k.lease_expires_at,
           pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) k.lease_expires_at, k.checkpoint_phase
    FROM idem.keys AS k
    WHERE k.state OPERATOR(pg_catalog.=) 'p'
      AND k.lease_expires_at OPERATOR(pg_catalog.<) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) older_than)
      AND k.expires_at OPERATOR(pg_catalog.>=) pg_catalog.clock_timestamp()
    ORDER BY k.lease_expires_at;
END;

-- Tenants as an access boundary (opt-in). With pg_idem.tenant_grants on, a role acts only on
-- the tenants granted here to it or to a role whose privileges it has; superusers on every
-- tenant. The grants are data of the extension: pg_dump keeps them.

CREATE FUNCTION idem_grant_tenant(role regrole, tenant text) RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_grant_tenant_wrapper';

COMMENT ON FUNCTION idem_grant_tenant(regrole, text) IS
'Let a role (and the roles that have its privileges) act on a tenant when pg_idem.tenant_grants is on; true if the grant is new';

CREATE FUNCTION idem_revoke_tenant(role regrole, tenant text) RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_revoke_tenant_wrapper';

COMMENT ON FUNCTION idem_revoke_tenant(regrole, text) IS
'Take a grant of idem_grant_tenant back; true if there was one';

CREATE FUNCTION idem_tenant_grants(OUT role regrole, OUT tenant text) RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
BEGIN ATOMIC
    SELECT g.role, g.tenant FROM idem.tenant_grants AS g ORDER BY g.tenant, g.role::pg_catalog.text;
END;

COMMENT ON FUNCTION idem_tenant_grants() IS
'Every grant of idem_grant_tenant, by tenant';

-- granting is an administrator's act; the list is for monitoring as well
REVOKE ALL ON FUNCTION idem_grant_tenant(regrole, text), idem_revoke_tenant(regrole, text),
    idem_tenant_grants() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idem_tenant_grants() TO pg_monitor;
