DECLARE
    s idem.owner_settings := idem.owner_settings();
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    PERFORM idem.check_fence(fence);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    PERFORM idem.fenced('idem_release', tenant, key, fence, 'release', pg_catalog.clock_timestamp());
END
