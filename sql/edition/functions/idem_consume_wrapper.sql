DECLARE
    s idem.owner_settings := idem.owner_settings();
    ttl_us bigint;
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    ttl_us := idem.ttl_us(ttl);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    RETURN idem.consume(tenant, key, ttl_us, pg_catalog.clock_timestamp());
END
