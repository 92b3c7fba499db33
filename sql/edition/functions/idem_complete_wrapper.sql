DECLARE
    s idem.owner_settings := idem.owner_settings();
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    PERFORM idem.check_fence(fence);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    PERFORM idem.check_payload(response_body, 'response_body', s.max_response_bytes);
    RETURN (idem.fenced('idem_complete', tenant, key, fence, 'complete', pg_catalog.clock_timestamp(),
                        response_code => response_code, response_body => response_body)).expires_at;
END
