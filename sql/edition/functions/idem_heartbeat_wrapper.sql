DECLARE
    s idem.owner_settings := idem.owner_settings();
    lease_us bigint;
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    PERFORM idem.check_fence(fence);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    lease_us := idem.lease_us(lease, s.lease_us);
    RETURN (idem.fenced('idem_heartbeat', tenant, key, fence, 'heartbeat', pg_catalog.clock_timestamp(),
                        lease_us => lease_us)).lease_expires_at;
END
