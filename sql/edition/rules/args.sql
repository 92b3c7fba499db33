-- ---------------------------------------------------------------------------------------------
-- Argument checks (src/sql_api/args.rs)
-- ---------------------------------------------------------------------------------------------

-- A tenant, key or stream name: not NULL, not empty, at most pg_idem.max_key_length characters.
CREATE FUNCTION idem.check_name(value text, argument text, max_chars integer) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    chars integer;
BEGIN
    IF value IS NULL THEN
        PERFORM idem.null_argument(argument,
            'Pass a non-empty text; single-tenant applications can use a constant tenant such as ''default''.');
    END IF;
    IF value OPERATOR(pg_catalog.=) '' THEN
        PERFORM idem.invalid_argument(argument, 'must not be empty',
            pg_catalog.format('An empty %s cannot identify anything.', argument), 'Pass a non-empty text.');
    END IF;
    chars := pg_catalog.char_length(value);
    IF chars OPERATOR(pg_catalog.>) max_chars THEN
        PERFORM idem.invalid_argument(argument, 'is too long',
            pg_catalog.format('It has %s characters; pg_idem.max_key_length allows %s.', chars, max_chars),
            'Use a shorter value, such as a UUID from idem_new_key(), or raise pg_idem.max_key_length.');
    END IF;
    RETURN value;
END
$$;

-- Whether idem.check_tenant_and_key has something to refuse: false for every valid pair, true
-- for every pair it refuses. A valid call tests this instead of calling the check: LANGUAGE sql
-- with one SELECT, so the planner inlines it into the caller's expression (no call at all).
CREATE FUNCTION idem.tenant_and_key_to_check(tenant text, key text, max_chars integer) RETURNS boolean
LANGUAGE sql
AS $$
    SELECT tenant IS NULL OR key IS NULL OR tenant OPERATOR(pg_catalog.=) '' OR key OPERATOR(pg_catalog.=) ''
        OR pg_catalog.char_length(tenant) OPERATOR(pg_catalog.>) max_chars
        OR pg_catalog.char_length(key) OPERATOR(pg_catalog.>) max_chars
        OR pg_catalog.octet_length(tenant) OPERATOR(pg_catalog.+) pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) @MAX_KEY_BYTES@
$$;

-- A tenant and key that fit the index together (at most @MAX_KEY_BYTES@ bytes).
CREATE FUNCTION idem.check_tenant_and_key(tenant text, key text, key_argument text, max_chars integer)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    bytes integer;
BEGIN
    PERFORM idem.check_name(tenant, 'tenant', max_chars);
    PERFORM idem.check_name(key, key_argument, max_chars);
    bytes := pg_catalog.octet_length(tenant) OPERATOR(pg_catalog.+) pg_catalog.octet_length(key);
    IF bytes OPERATOR(pg_catalog.>) @MAX_KEY_BYTES@ THEN
        PERFORM idem.invalid_argument(key_argument, 'is too long',
            pg_catalog.format('tenant and %s take %s bytes together; at most @MAX_KEY_BYTES@ fit in the index.', key_argument, bytes),
            'Use shorter values, such as a UUID from idem_new_key().');
    END IF;
END
$$;

-- A request fingerprint: not NULL, at most @MAX_REQUEST_HASH_CHARS@ characters; what idem.keys stores for it.
CREATE FUNCTION idem.check_request_hash(value text) RETURNS bytea
LANGUAGE plpgsql
AS $$
DECLARE
    chars integer;
BEGIN
    IF value IS NULL THEN
        PERFORM idem.null_argument('request_hash',
            'Pass a fingerprint of the request, for example idem_request_hash(method, path, body), or '''' to skip the check.');
    END IF;
    chars := pg_catalog.char_length(value);
    IF chars OPERATOR(pg_catalog.>) @MAX_REQUEST_HASH_CHARS@ THEN
        PERFORM idem.invalid_argument('request_hash', 'is too long',
            pg_catalog.format('It has %s characters; at most @MAX_REQUEST_HASH_CHARS@ are accepted.', chars),
            'Pass a digest of the request, such as idem_request_hash(method, path, body), not the request itself.');
    END IF;
    RETURN idem.stored_request_hash(value);
END
$$;

CREATE FUNCTION idem.check_fence(fence bigint) RETURNS bigint
LANGUAGE plpgsql
AS $$
BEGIN
    IF fence IS NULL THEN
        PERFORM idem.null_argument('fence', 'Pass the fence that idem_claim returned with outcome ''claimed''.');
    END IF;
    RETURN fence;
END
$$;

-- A lease or ttl in microseconds: the argument, or default_us when it is NULL; positive and at
-- most 100 years (36000 days).
CREATE FUNCTION idem.check_duration(value interval, argument text, default_us bigint) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    us numeric;
BEGIN
    IF value IS NULL THEN
        RETURN default_us;
    END IF;
    us := idem.interval_us(value);
    IF us IS NULL THEN
        -- an infinite interval (PostgreSQL 17+), whose months and days EXTRACT cannot give
        us := CASE WHEN value OPERATOR(pg_catalog.>) '0'::pg_catalog.interval
                   THEN 9223372036854775807 ELSE -9223372036854775807 END;
    END IF;
    IF us OPERATOR(pg_catalog.<=) 0 THEN
        PERFORM idem.invalid_argument(argument, 'must be positive', pg_catalog.format('Got %s microseconds.', us),
            'Pass a positive interval such as ''30 seconds'', or NULL for the default setting.');
    END IF;
    IF us OPERATOR(pg_catalog.>) 3110400000000000 THEN
        PERFORM idem.invalid_argument(argument, 'is too long',
            pg_catalog.format('Got %s microseconds; at most 100 years are accepted, counted as 36000 days (an interval''s month is 30 days).', us),
            'Pass a shorter interval, or NULL for the default setting.');
    END IF;
    RETURN us::pg_catalog.int8;
END
$$;

-- Whether idem.check_payload has something to measure: false for a value stored as it is
-- (not compressed) within the limit with 4 bytes to spare (a header it may gain when stored);
-- the check measures the value decompressed (PERFORM hands it over detoasted). Inlined into the
-- caller's expression, as idem.tenant_and_key_to_check.
CREATE FUNCTION idem.payload_to_check(value jsonb, max_bytes integer) RETURNS boolean
LANGUAGE sql
AS $$
    SELECT pg_catalog.pg_column_compression(value) IS NOT NULL
        OR pg_catalog.pg_column_size(value) OPERATOR(pg_catalog.+) 4 OPERATOR(pg_catalog.>) max_bytes
$$;

-- A response body or checkpoint payload within pg_idem.max_response_bytes.
CREATE FUNCTION idem.check_payload(value jsonb, argument text, max_bytes integer) RETURNS jsonb
LANGUAGE plpgsql
AS $$
DECLARE
    size integer := pg_catalog.pg_column_size(value);
BEGIN
    IF size OPERATOR(pg_catalog.>) max_bytes THEN
        PERFORM idem.too_large(argument,
            pg_catalog.format('It takes %s bytes; pg_idem.max_response_bytes allows %s.', size, max_bytes),
            'Store a reference to the response (an id or a URL) instead of the whole body, or raise pg_idem.max_response_bytes.');
    END IF;
    RETURN value;
END
$$;

-- The lease and ttl of a claim: the arguments, else the session's settings (pg_idem.lease_timeout
-- in milliseconds, pg_idem.ttl in seconds, as natively), else the owner's (default_us, from
-- idem.owner_settings()).
CREATE FUNCTION idem.lease_us(lease interval, default_us bigint) RETURNS bigint
LANGUAGE sql
AS $$
    -- the usual case (no argument, no session setting) without a call
    SELECT CASE WHEN lease IS NULL AND COALESCE(pg_catalog.current_setting('pg_idem.lease_timeout', true), '') OPERATOR(pg_catalog.=) ''
                THEN default_us
                ELSE idem.check_duration(lease, 'lease', idem.session_duration_us('pg_idem.lease_timeout', default_us)) END
$$;

CREATE FUNCTION idem.ttl_us(ttl interval, default_us bigint) RETURNS bigint
LANGUAGE sql
AS $$
    SELECT CASE WHEN ttl IS NULL AND COALESCE(pg_catalog.current_setting('pg_idem.ttl', true), '') OPERATOR(pg_catalog.=) ''
                THEN default_us
                ELSE idem.check_duration(ttl, 'ttl', idem.session_duration_us('pg_idem.ttl', default_us)) END
$$;

-- pg_idem.reject_stale_uuidv7: the session's setting, else the owner's (`owner`).
CREATE FUNCTION idem.reject_stale_uuidv7(owner boolean) RETURNS boolean
LANGUAGE sql
AS $$
    SELECT CASE WHEN COALESCE(pg_catalog.current_setting('pg_idem.reject_stale_uuidv7', true), '') OPERATOR(pg_catalog.=) ''
                THEN owner
                ELSE idem.setting_value('pg_idem.reject_stale_uuidv7',
                         pg_catalog.current_setting('pg_idem.reject_stale_uuidv7', true), false) OPERATOR(pg_catalog.=) 'on' END
$$;

-- The elements of a batch argument: not NULL, at most pg_idem.max_batch_keys of them (counted
-- before any is read), no NULL element. Returns how many.
CREATE FUNCTION idem.check_batch(elements anyarray, argument text, hint text, max_batch integer) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    n integer;
BEGIN
    IF elements IS NULL THEN
        PERFORM idem.null_argument(argument, hint);
    END IF;
    n := COALESCE(pg_catalog.cardinality(elements), 0);
    IF n OPERATOR(pg_catalog.>) max_batch THEN
        PERFORM idem.too_large(argument,
            pg_catalog.format('The batch has %s elements; pg_idem.max_batch_keys allows %s.', n, max_batch),
            'Split the batch, or raise pg_idem.max_batch_keys.');
    END IF;
    FOR i IN 1..n LOOP
        IF elements[i] IS NULL THEN
            PERFORM idem.null_argument(pg_catalog.format('%s[%s]', argument, i), 'Remove NULL elements from the batch.');
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- The name of a step (a checkpoint phase, a downstream call): present, at most 256 characters.
CREATE FUNCTION idem.check_label(value text, argument text, hint text) RETURNS text
LANGUAGE plpgsql
AS $$
BEGIN
    IF value IS NULL THEN
        PERFORM idem.null_argument(argument, hint);
    END IF;
    IF pg_catalog.char_length(value) OPERATOR(pg_catalog.>) 256 THEN
        PERFORM idem.invalid_argument(argument, 'is too long',
            pg_catalog.format('It has %s characters; at most 256 are accepted.', pg_catalog.char_length(value)), hint);
    END IF;
    RETURN value;
END
$$;
