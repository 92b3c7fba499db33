DECLARE
    s idem.owner_settings := idem.owner_settings();
    ttl_us bigint;
    n integer;
    now timestamptz;
BEGIN
    -- any array (another lower bound, several dimensions): its elements in order, from 1
    keys := CASE WHEN keys IS NOT NULL THEN ARRAY(SELECT pg_catalog.unnest(keys)) END;
    PERFORM idem.check_name(tenant, 'tenant', s.max_key_length);
    ttl_us := idem.ttl_us(ttl);
    IF s.tenant_grants THEN
        PERFORM idem.check_access(tenant, true);
    END IF;
    n := idem.check_batch(keys, 'keys', 'Pass an array of message keys, such as ARRAY[''m1'', ''m2''].', s.max_batch_keys);
    FOR i IN 1..n LOOP
        IF keys[i] IS NULL OR keys[i] OPERATOR(pg_catalog.=) ''
           OR pg_catalog.char_length(keys[i]) OPERATOR(pg_catalog.>) s.max_key_length
           OR pg_catalog.octet_length(tenant) OPERATOR(pg_catalog.+) pg_catalog.octet_length(keys[i]) OPERATOR(pg_catalog.>) 2400 THEN
            PERFORM idem.check_tenant_and_key(tenant, keys[i], pg_catalog.format('keys[%s]', i), s.max_key_length);
        END IF;
    END LOOP;
    now := pg_catalog.clock_timestamp();
    -- in input order, so that a key repeated in the batch meets its own consume: new once
    FOR i IN 1..n LOOP
        IF idem.consume(tenant, keys[i], ttl_us, now) THEN
            RETURN NEXT keys[i];
        END IF;
    END LOOP;
END
