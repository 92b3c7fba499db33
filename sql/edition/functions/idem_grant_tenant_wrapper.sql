-- (the ON CONFLICT columns are the table's: a rebuilt key keeps them, not always its name)
#variable_conflict use_column
DECLARE
    s idem.owner_settings := idem.owner_settings();
BEGIN
    -- a role of OID 0 (regrole's '-') is no role, refused as a missing one
    IF role IS NULL OR role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN
        PERFORM idem.null_argument('role', 'Name the role, such as ''app'' (a regrole).');
    END IF;
    PERFORM idem.check_name(tenant, 'tenant', s.max_key_length);
    INSERT INTO idem.tenant_grants AS g (role, tenant) VALUES (idem_grant_tenant.role, idem_grant_tenant.tenant)
    ON CONFLICT (tenant, role) DO NOTHING;
    RETURN FOUND;
END
