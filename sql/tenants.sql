-- Tenants as an access boundary (opt-in). With pg_idem.tenant_grants on, a role acts only on
-- the tenants granted here to it or to a role whose privileges it has; superusers on every
-- tenant. The grants are data of the extension: pg_dump keeps them.

CREATE FUNCTION idem_grant_tenant(role regrole, tenant text) RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_grant_tenant_wrapper';

COMMENT ON FUNCTION idem_grant_tenant(regrole, text) IS
'Let a role (and the roles that have its privileges) act on a tenant when pg_idem.tenant_grants is on; true if the grant is new';

CREATE FUNCTION idem_revoke_tenant(role regrole, tenant text) RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
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
