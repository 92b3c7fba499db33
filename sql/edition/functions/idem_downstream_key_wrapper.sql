BEGIN
    PERFORM idem.check_tenant_and_key(tenant, key, 'key', (idem.owner_settings(warn => false)).max_key_length);
    PERFORM idem.check_label(step, 'step', 'Name the external call, such as ''charge''.');
    RETURN idem.downstream_key(tenant, key, step);
END
