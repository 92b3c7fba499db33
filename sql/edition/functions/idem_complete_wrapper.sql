DECLARE
    s idem.owner_settings := idem.owner_settings();
BEGIN
    -- the checks of src/sql_api/args.rs: each function raises its documented error; a valid
    -- call tests their conditions inline (idem.*_to_check) and makes no call for them
    IF idem.tenant_and_key_to_check(tenant, key, s.max_key_length) THEN
        PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    END IF;
    IF fence IS NULL THEN
        PERFORM idem.check_fence(fence);
    END IF;
    IF s.tenant_grants THEN
        PERFORM idem.check_access(tenant, true);
    END IF;
    IF idem.payload_to_check(response_body, s.max_response_bytes) THEN
        PERFORM idem.check_payload(response_body, 'response_body', s.max_response_bytes);
    END IF;
    RETURN (idem.fenced('idem_complete', tenant, key, fence, 'complete', pg_catalog.clock_timestamp(),
                        response_code => response_code, response_body => response_body)).expires_at;
END
