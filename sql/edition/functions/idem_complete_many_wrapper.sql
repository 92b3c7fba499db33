DECLARE
    s idem.owner_settings := idem.owner_settings();
    n integer;
    now timestamptz;
BEGIN
    -- any array (another lower bound, several dimensions): its elements in order, from 1
    keys := CASE WHEN keys IS NOT NULL THEN ARRAY(SELECT pg_catalog.unnest(keys)) END;
    fences := CASE WHEN fences IS NOT NULL THEN ARRAY(SELECT pg_catalog.unnest(fences)) END;
    response_codes := CASE WHEN response_codes IS NOT NULL THEN ARRAY(SELECT pg_catalog.unnest(response_codes)) END;
    response_bodies := CASE WHEN response_bodies IS NOT NULL THEN ARRAY(SELECT pg_catalog.unnest(response_bodies)) END;
    PERFORM idem.check_name(tenant, 'tenant', s.max_key_length);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    n := idem.check_batch(keys, 'keys', 'Pass the keys idem_claim_many claimed, such as ARRAY[''k1'', ''k2''].', s.max_batch_keys);
    PERFORM idem.check_batch(fences, 'fences', 'Pass the fence idem_claim_many returned for each key, in the same order.', s.max_batch_keys);
    IF response_codes IS NULL THEN
        PERFORM idem.null_argument('response_codes', 'Pass one response code per key (NULL elements are allowed).');
    END IF;
    IF COALESCE(pg_catalog.cardinality(fences), 0) OPERATOR(pg_catalog.<>) n THEN
        PERFORM idem.invalid_argument('fences', 'must have one element per key',
            pg_catalog.format('keys has %s elements, fences %s.', n, COALESCE(pg_catalog.cardinality(fences), 0)),
            'Pass arrays of the same length, the i-th element for the i-th key.');
    END IF;
    IF COALESCE(pg_catalog.cardinality(response_codes), 0) OPERATOR(pg_catalog.<>) n THEN
        PERFORM idem.invalid_argument('response_codes', 'must have one element per key',
            pg_catalog.format('keys has %s elements, response_codes %s.', n, COALESCE(pg_catalog.cardinality(response_codes), 0)),
            'Pass arrays of the same length, the i-th element for the i-th key.');
    END IF;
    IF response_bodies IS NOT NULL THEN
        IF COALESCE(pg_catalog.cardinality(response_bodies), 0) OPERATOR(pg_catalog.<>) n THEN
            PERFORM idem.invalid_argument('response_bodies', 'must have one element per key',
                pg_catalog.format('keys has %s elements, response_bodies %s.', n, COALESCE(pg_catalog.cardinality(response_bodies), 0)),
                'Pass arrays of the same length, the i-th element for the i-th key.');
        END IF;
        FOR i IN 1..n LOOP
            PERFORM idem.check_payload(response_bodies[i], pg_catalog.format('response_bodies[%s]', i), s.max_response_bytes);
        END LOOP;
    END IF;
    FOR i IN 1..n LOOP
        PERFORM idem.check_tenant_and_key(tenant, keys[i], pg_catalog.format('keys[%s]', i), s.max_key_length);
        PERFORM idem.check_tenant_and_key(tenant, keys[i], 'key', s.max_key_length);
    END LOOP;
    now := pg_catalog.clock_timestamp();
    -- all or nothing: the first refusal raises, and the statement fails as one idem_complete would
    FOR i IN 1..n LOOP
        key := keys[i];
        expires_at := (idem.fenced('idem_complete_many', tenant, keys[i], fences[i], 'complete', now,
                                   response_code => response_codes[i], response_body => response_bodies[i])).expires_at;
        RETURN NEXT;
    END LOOP;
END
