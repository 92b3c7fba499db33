BEGIN
    IF max_rows OPERATOR(pg_catalog.<) 0 THEN
        PERFORM idem.invalid_argument('max_rows', 'must not be negative', pg_catalog.format('Got %s.', max_rows),
            'Pass how many keys to delete at most, or NULL for all expired keys.');
    END IF;
    RETURN idem.purge(max_rows, idem.purgeable_tenants((idem.owner_settings()).tenant_grants),
                      pg_catalog.clock_timestamp());
END
