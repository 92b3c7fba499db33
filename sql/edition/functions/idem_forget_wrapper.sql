DECLARE
    s idem.owner_settings := idem.owner_settings();
    forgotten boolean;
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    PERFORM idem.prevent_if_read_only('DELETE');
    PERFORM pg_catalog.pg_advisory_xact_lock(idem.key_lock_id(tenant, key));
    DELETE FROM idem.keys AS k
     WHERE k.tenant OPERATOR(pg_catalog.=) idem_forget.tenant AND k.key OPERATOR(pg_catalog.=) idem_forget.key
    RETURNING true INTO forgotten;
    IF NOT FOUND AND EXISTS (SELECT FROM idem.keys AS k
                              WHERE k.tenant OPERATOR(pg_catalog.=) idem_forget.tenant
                                AND k.key OPERATOR(pg_catalog.=) idem_forget.key) THEN
        PERFORM idem.dropped_write('idem_forget', tenant, key);
    END IF;
    RETURN FOUND;
END
