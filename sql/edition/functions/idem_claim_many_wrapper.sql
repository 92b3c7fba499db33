DECLARE
    s idem.owner_settings := idem.owner_settings();
    n integer;
    lease_us bigint;
    ttl_us bigint;
    stored bytea[];
    reject_stale boolean;
    now timestamptz;
    answer @extschema@.idem_claim_result;
BEGIN
    -- any array (another lower bound, several dimensions): its elements in order, from 1
    keys := CASE WHEN keys IS NOT NULL THEN ARRAY(SELECT pg_catalog.unnest(keys)) END;
    request_hashes := CASE WHEN request_hashes IS NOT NULL THEN ARRAY(SELECT pg_catalog.unnest(request_hashes)) END;
    PERFORM idem.check_name(tenant, 'tenant', s.max_key_length);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    IF keys IS NULL THEN
        PERFORM idem.null_argument('keys', 'Pass an array of keys, such as ARRAY[''k1'', ''k2''].');
    END IF;
    IF request_hashes IS NULL THEN
        PERFORM idem.null_argument('request_hashes', 'Pass one request hash per key, in the same order.');
    END IF;
    n := COALESCE(pg_catalog.cardinality(keys), 0);
    IF n OPERATOR(pg_catalog.<>) COALESCE(pg_catalog.cardinality(request_hashes), 0) THEN
        PERFORM idem.invalid_argument('request_hashes', 'must have one element per key',
            pg_catalog.format('keys has %s elements, request_hashes %s.', n, COALESCE(pg_catalog.cardinality(request_hashes), 0)),
            'Pass arrays of the same length, the i-th hash for the i-th key.');
    END IF;
    IF n OPERATOR(pg_catalog.>) s.max_batch_keys THEN
        PERFORM idem.too_large('keys',
            pg_catalog.format('The batch has %s elements; pg_idem.max_batch_keys allows %s.', n, s.max_batch_keys),
            'Split the batch, or raise pg_idem.max_batch_keys.');
    END IF;
    FOR i IN 1..n LOOP
        IF keys[i] IS NULL THEN
            PERFORM idem.null_argument(pg_catalog.format('keys[%s]', i), 'Remove NULL elements from the batch.');
        END IF;
        IF request_hashes[i] IS NULL THEN
            PERFORM idem.null_argument(pg_catalog.format('request_hashes[%s]', i), 'Pass a hash for every key ('''' to skip the check).');
        END IF;
    END LOOP;
    FOR i IN 1..n LOOP
        PERFORM idem.check_tenant_and_key(tenant, keys[i], pg_catalog.format('keys[%s]', i), s.max_key_length);
        stored := stored OPERATOR(pg_catalog.||) idem.check_request_hash(request_hashes[i]);
        IF i OPERATOR(pg_catalog.=) 1 THEN
            -- checked with the first element, as natively (an empty batch checks neither)
            lease_us := idem.lease_us(lease, s.lease_us);
            ttl_us := idem.ttl_us(ttl, s.ttl_us);
        END IF;
    END LOOP;
    reject_stale := idem.reject_stale_uuidv7(s.reject_stale_uuidv7);
    now := pg_catalog.clock_timestamp();
    -- in input order, so that a key repeated in the batch meets its own earlier claim
    FOR i IN 1..n LOOP
        answer := idem.claim('idem_claim_many', tenant, keys[i], stored[i], lease_us, ttl_us, reject_stale, now);
        key := keys[i];
        outcome := answer.outcome;
        fence := answer.fence;
        attempt := answer.attempt;
        response_code := answer.response_code;
        response_body := answer.response_body;
        lease_expires_at := answer.lease_expires_at;
        expires_at := answer.expires_at;
        checkpoint_phase := answer.checkpoint_phase;
        checkpoint_data := answer.checkpoint_data;
        RETURN NEXT;
    END LOOP;
END
