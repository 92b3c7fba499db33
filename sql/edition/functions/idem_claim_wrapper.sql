DECLARE
    s idem.owner_settings := idem.owner_settings();
    stored_hash bytea;
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    stored_hash := idem.check_request_hash(request_hash);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    RETURN idem.claim(tenant, key, stored_hash, idem.lease_us(lease), idem.ttl_us(ttl),
        COALESCE(pg_catalog.current_setting('pg_idem.reject_stale_uuidv7', true), '') IN ('on', 'true', '1', 'yes'),
        pg_catalog.clock_timestamp());
END
