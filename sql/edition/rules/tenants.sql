-- ---------------------------------------------------------------------------------------------
-- Tenants as an access boundary (src/tenants/access.rs)
-- ---------------------------------------------------------------------------------------------

-- Whom a tenant check asks about: the role the session acts as (SET ROLE's, else the session
-- user), which pg_idem's own switch to its owner (SECURITY DEFINER) does not change. Inside a
-- security-restricted operation (ANALYZE, VACUUM, REINDEX, CREATE INDEX, REFRESH MATERIALIZED
-- VIEW, autovacuum running a table owner's index expressions), PostgreSQL acts as the table's
-- owner, which a SQL function cannot learn: the session's role would lend that code the rights
-- of whoever started the maintenance, so no tenant is allowed there at all.
-- Whether this runs inside a security-restricted operation: CLOSE is refused there (42501)
-- before it looks for its cursor, and elsewhere fails with 34000 for a cursor nobody declared.
-- It changes nothing (UNLISTEN would queue an action in a session that ever ran LISTEN, and
-- PREPARE TRANSACTION refuses a transaction with one). Not in parallel mode (a subtransaction):
-- the functions that check tenants are PARALLEL UNSAFE.
CREATE FUNCTION idem.in_restricted_operation() RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE 'CLOSE "pg_idem: no such cursor"';
    RETURN false;
EXCEPTION
    WHEN insufficient_privilege THEN
        RETURN true;
    WHEN invalid_cursor_name THEN
        RETURN false;
END
$$;

CREATE FUNCTION idem.check_access(tenant text, tenant_grants boolean) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    role_name text;
BEGIN
    IF NOT tenant_grants THEN
        RETURN;
    END IF;
    -- first: inside such an operation the session's role (a superuser's, autovacuum's) is not
    -- the role that acts
    IF idem.in_restricted_operation() THEN
        PERFORM idem.raise_error('42501', pg_catalog.format('permission denied for tenant "%s"', tenant),
            'pg_idem.tenant_grants is on and the call runs inside a security-restricted operation (maintenance running a table owner''s code), whose role pg_idem''s SQL edition cannot check.',
            'Do not call pg_idem from index expressions, or from other code that maintenance runs; the native edition checks the table owner''s grants there.');
    END IF;
    role_name := pg_catalog.current_setting('role');
    IF role_name OPERATOR(pg_catalog.=) 'none' THEN
        role_name := SESSION_USER;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_roles AS r
               WHERE r.rolname OPERATOR(pg_catalog.=) role_name AND r.rolsuper) THEN
        RETURN;
    END IF;
    IF EXISTS (
        SELECT FROM idem.tenant_grants AS g
        WHERE g.tenant OPERATOR(pg_catalog.=) check_access.tenant
          AND pg_catalog.pg_has_role(role_name, g.role::pg_catalog.oid, 'USAGE')) THEN
        -- the grants were read with the transaction's snapshot: under REPEATABLE READ or
        -- SERIALIZABLE it may predate a revoke committed since, which counts from the next
        -- statement (as a lost membership does: pg_has_role reads the catalogs as they are
        -- now). A row lock meets the newest version: a grant deleted since raises 40001.
        IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed'
           OR pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
            RETURN;
        END IF;
        BEGIN
            PERFORM FROM idem.tenant_grants AS g
             WHERE g.tenant OPERATOR(pg_catalog.=) check_access.tenant
               AND pg_catalog.pg_has_role(role_name, g.role::pg_catalog.oid, 'USAGE')
               FOR KEY SHARE;
            IF FOUND THEN
                RETURN;
            END IF;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- revoked since the snapshot: refused below
        END;
    END IF;
    PERFORM idem.raise_error('42501', pg_catalog.format('permission denied for tenant "%s"', tenant),
        pg_catalog.format('Role "%s" has no grant on tenant "%s" (directly or through a role it has the privileges of), and pg_idem.tenant_grants is on.', role_name, tenant),
        'A superuser grants the tenant with idem_grant_tenant(role, tenant); SET ROLE to a role that has the grant also works.');
END
$$;
