DECLARE
    s idem.owner_settings := idem.owner_settings();
BEGIN
    -- the checks of src/sql_api/args.rs: each function raises its documented error; the
    -- conditions are tested inline first, so that a valid call makes no call for them
    IF tenant IS NULL OR key IS NULL OR tenant OPERATOR(pg_catalog.=) '' OR key OPERATOR(pg_catalog.=) ''
       OR pg_catalog.char_length(tenant) OPERATOR(pg_catalog.>) s.max_key_length
       OR pg_catalog.char_length(key) OPERATOR(pg_catalog.>) s.max_key_length
       OR pg_catalog.octet_length(tenant) OPERATOR(pg_catalog.+) pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) @MAX_KEY_BYTES@ THEN
        PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    END IF;
    IF fence IS NULL THEN
        PERFORM idem.check_fence(fence);
    END IF;
    IF s.tenant_grants THEN
        PERFORM idem.check_access(tenant, true);
    END IF;
    -- the check measures the body decompressed (PERFORM hands it over detoasted): skipped only
    -- for a body not compressed and within the limit with 4 bytes to spare (a header it may gain)
    IF pg_catalog.pg_column_compression(response_body) IS NOT NULL
       OR pg_catalog.pg_column_size(response_body) OPERATOR(pg_catalog.+) 4 OPERATOR(pg_catalog.>) s.max_response_bytes THEN
        PERFORM idem.check_payload(response_body, 'response_body', s.max_response_bytes);
    END IF;
    RETURN (idem.fenced('idem_complete', tenant, key, fence, 'complete', pg_catalog.clock_timestamp(),
                        response_code => response_code, response_body => response_body)).expires_at;
END
