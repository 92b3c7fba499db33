-- (the ON CONFLICT columns are the table's: a rebuilt key keeps them, not always its name)
#variable_conflict use_column
DECLARE
    s idem.owner_settings := idem.owner_settings();
BEGIN
    IF role IS NULL THEN
        PERFORM idem.null_argument('role', 'Name the role, such as ''app'' (a regrole).');
    END IF;
    PERFORM idem.check_name(tenant, 'tenant', s.max_key_length);
    INSERT INTO idem.tenant_grants AS g (role, tenant) VALUES (idem_grant_tenant.role, idem_grant_tenant.tenant)
    ON CONFLICT (tenant, role) DO NOTHING;
    RETURN FOUND;
END
