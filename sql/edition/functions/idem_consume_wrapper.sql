DECLARE
    s idem.owner_settings := idem.owner_settings();
    ttl_us bigint;
BEGIN
    -- the checks of src/sql_api/args.rs: each function raises its documented error; a valid
    -- call tests their conditions inline (idem.*_to_check) and makes no call for them
    IF idem.tenant_and_key_to_check(tenant, key, s.max_key_length) THEN
        PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    END IF;
    ttl_us := idem.ttl_us(ttl, s.ttl_us);
    IF s.tenant_grants THEN
        PERFORM idem.check_access(tenant, true);
    END IF;
    RETURN idem.consume('idem_consume', tenant, key, ttl_us, pg_catalog.clock_timestamp());
END
