DECLARE
    s idem.owner_settings := idem.owner_settings();
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, stream, 'stream', s.max_key_length);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    RETURN idem.current_watermark(tenant, stream);
END
