DECLARE
    s idem.owner_settings := idem.owner_settings();
BEGIN
    -- a role of OID 0 (regrole's '-') is no role, refused as a missing one
    IF role IS NULL OR role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN
        PERFORM idem.null_argument('role', 'Name the role, such as ''app'' (a regrole).');
    END IF;
    PERFORM idem.check_name(tenant, 'tenant', s.max_key_length);
    DELETE FROM idem.tenant_grants AS g
     WHERE g.tenant OPERATOR(pg_catalog.=) idem_revoke_tenant.tenant
       AND g.role::pg_catalog.oid OPERATOR(pg_catalog.=) idem_revoke_tenant.role::pg_catalog.oid;
    RETURN FOUND;
END
