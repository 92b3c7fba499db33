DECLARE
    s idem.owner_settings := idem.owner_settings();
BEGIN
    -- the checks of src/sql_api/args.rs: each function raises its documented error; a valid
    -- call tests their conditions inline (idem.*_to_check) and makes no call for them
    IF idem.tenant_and_key_to_check(tenant, key, s.max_key_length) THEN
        PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    END IF;
    IF request_hash IS NULL OR pg_catalog.char_length(request_hash) OPERATOR(pg_catalog.>) @MAX_REQUEST_HASH_CHARS@ THEN
        PERFORM idem.check_request_hash(request_hash);
    END IF;
    IF s.tenant_grants THEN
        PERFORM idem.check_access(tenant, true);
    END IF;
    RETURN idem.claim('idem_claim', tenant, key, idem.stored_request_hash(request_hash), idem.lease_us(lease, s.lease_us), idem.ttl_us(ttl, s.ttl_us),
        idem.reject_stale_uuidv7(s.reject_stale_uuidv7),
        pg_catalog.clock_timestamp());
END
