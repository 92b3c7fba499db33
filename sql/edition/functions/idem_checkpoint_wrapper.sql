DECLARE
    s idem.owner_settings := idem.owner_settings();
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    PERFORM idem.check_fence(fence);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    PERFORM idem.check_label(phase, 'phase', 'Name the step the attempt has finished, such as ''charged''; keep what it produced in data.');
    PERFORM idem.check_payload(data, 'data', s.max_response_bytes);
    PERFORM idem.fenced('idem_checkpoint', tenant, key, fence, 'checkpoint', pg_catalog.clock_timestamp(),
                        phase => phase, data => data);
END
