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

-- Natively each backend keeps its answers to "may this role act on this tenant": any write to
-- the grants (idem_grant_tenant's, a restore's COPY, an INSERT or DELETE by hand, TRUNCATE, a
-- logical replica's apply, hence ALWAYS) tells every backend when its transaction commits. A
-- statement trigger: reads never fire it.
CREATE FUNCTION idem.tenant_grants_changed() RETURNS trigger
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_tenant_grants_changed_wrapper';

CREATE TRIGGER tenant_grants_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idem.tenant_grants
FOR EACH STATEMENT EXECUTE FUNCTION idem.tenant_grants_changed();
ALTER TABLE idem.tenant_grants ENABLE ALWAYS TRIGGER tenant_grants_changed;

-- granting is an administrator's act; the list is for monitoring as well
REVOKE ALL ON FUNCTION idem_grant_tenant(regrole, text), idem_revoke_tenant(regrole, text),
    idem_tenant_grants(), idem.tenant_grants_changed() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idem_tenant_grants() TO pg_monitor;
