-- The SQL edition's rules: the same decisions as the native edition's src/rules/ (claims,
-- consumes, fenced calls, a key's times) and src/store/spi.rs (how a key is locked, read and
-- written), with the same errors (src/errors.rs) and argument checks (src/sql_api/args.rs).
-- tests/sql_edition.rs runs the same calls against both editions and compares every answer
-- and every error field by field.
--
-- These functions live in schema idem, which only pg_idem's owner may use; the public
-- functions (sql/edition/functions/) are SECURITY DEFINER with search_path pinned to
-- pg_catalog, pg_temp and call them as the owner, so they run under that path. They carry no
-- SET clause of their own: a function with one is never inlined, and from PL/pgSQL a LANGUAGE
-- sql function that is not inlined is planned anew at every call. Every name and operator is
-- qualified anyway.

-- ---------------------------------------------------------------------------------------------
-- Errors (src/errors.rs): one SQLSTATE per kind, a message naming the argument, detail, hint
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION idem.raise_error(code text, message text, detail text, hint text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- RAISE refuses a NULL option: an error without a detail or a hint leaves it out
    IF detail IS NULL AND hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
    ELSIF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, HINT = hint;
    ELSIF hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail;
    END IF;
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail, HINT = hint;
END
$$;

CREATE FUNCTION idem.null_argument(argument text, hint text) RETURNS void
LANGUAGE sql
AS $$
    SELECT idem.raise_error('22004', pg_catalog.format('argument "%s" must not be null', argument),
        pg_catalog.format('pg_idem cannot act on a NULL %s.', argument), hint)
$$;

CREATE FUNCTION idem.invalid_argument(argument text, problem text, detail text, hint text) RETURNS void
LANGUAGE sql
AS $$
    SELECT idem.raise_error('22023', pg_catalog.format('argument "%s" %s', argument, problem), detail, hint)
$$;

CREATE FUNCTION idem.too_large(argument text, detail text, hint text) RETURNS void
LANGUAGE sql
AS $$
    SELECT idem.raise_error('54000', pg_catalog.format('argument "%s" is too large', argument), detail, hint)
$$;

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

-- ---------------------------------------------------------------------------------------------
-- Tenants as an access boundary (src/tenants/access.rs)
-- ---------------------------------------------------------------------------------------------

-- Whom a tenant check asks about: the role the session acts as (SET ROLE's, else the session
-- user), which pg_idem's own switch to its owner (SECURITY DEFINER) does not change. Inside a
-- security-restricted operation (ANALYZE, VACUUM, REINDEX, CREATE INDEX, REFRESH MATERIALIZED
-- VIEW, autovacuum running a table owner's index expressions), PostgreSQL acts as the table's
-- owner, which a SQL function cannot learn: the session's role would lend that code the rights
-- of whoever started the maintenance, so no tenant is allowed there at all.
-- Whether this runs inside a security-restricted operation: CLOSE is refused there (42501)
-- before it looks for its cursor, and elsewhere fails with 34000 for a cursor nobody declared.
-- It changes nothing (UNLISTEN would queue an action in a session that ever ran LISTEN, and
-- PREPARE TRANSACTION refuses a transaction with one). Not in parallel mode (a subtransaction):
-- the functions that check tenants are PARALLEL UNSAFE.
CREATE FUNCTION idem.in_restricted_operation() RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE 'CLOSE "pg_idem: no such cursor"';
    RETURN false;
EXCEPTION
    WHEN insufficient_privilege THEN
        RETURN true;
    WHEN invalid_cursor_name THEN
        RETURN false;
END
$$;

CREATE FUNCTION idem.check_access(tenant text, tenant_grants boolean) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    role_name text;
BEGIN
    IF NOT tenant_grants THEN
        RETURN;
    END IF;
    -- first: inside such an operation the session's role (a superuser's, autovacuum's) is not
    -- the role that acts
    IF idem.in_restricted_operation() THEN
        PERFORM idem.raise_error('42501', pg_catalog.format('permission denied for tenant "%s"', tenant),
            'pg_idem.tenant_grants is on and the call runs inside a security-restricted operation (maintenance running a table owner''s code), whose role pg_idem''s SQL edition cannot check.',
            'Do not call pg_idem from index expressions, or from other code that maintenance runs; the native edition checks the table owner''s grants there.');
    END IF;
    role_name := pg_catalog.current_setting('role');
    IF role_name OPERATOR(pg_catalog.=) 'none' THEN
        role_name := SESSION_USER;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_roles AS r
               WHERE r.rolname OPERATOR(pg_catalog.=) role_name AND r.rolsuper) THEN
        RETURN;
    END IF;
    IF EXISTS (
        SELECT FROM idem.tenant_grants AS g
        WHERE g.tenant OPERATOR(pg_catalog.=) check_access.tenant
          AND pg_catalog.pg_has_role(role_name, g.role::pg_catalog.oid, 'USAGE')) THEN
        -- the grants were read with the transaction's snapshot: under REPEATABLE READ or
        -- SERIALIZABLE it may predate a revoke committed since, which counts from the next
        -- statement (as a lost membership does: pg_has_role reads the catalogs as they are
        -- now). A row lock meets the newest version: a grant deleted since raises 40001.
        IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed'
           OR pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
            RETURN;
        END IF;
        BEGIN
            PERFORM FROM idem.tenant_grants AS g
             WHERE g.tenant OPERATOR(pg_catalog.=) check_access.tenant
               AND pg_catalog.pg_has_role(role_name, g.role::pg_catalog.oid, 'USAGE')
               FOR KEY SHARE;
            IF FOUND THEN
                RETURN;
            END IF;
        EXCEPTION WHEN serialization_failure THEN
            NULL;  -- revoked since the snapshot: refused below
        END;
    END IF;
    PERFORM idem.raise_error('42501', pg_catalog.format('permission denied for tenant "%s"', tenant),
        pg_catalog.format('Role "%s" has no grant on tenant "%s" (directly or through a role it has the privileges of), and pg_idem.tenant_grants is on.', role_name, tenant),
        'A superuser grants the tenant with idem_grant_tenant(role, tenant); SET ROLE to a role that has the grant also works.');
END
$$;

-- ---------------------------------------------------------------------------------------------
-- A key as stored (src/rules/key_row.rs)
-- ---------------------------------------------------------------------------------------------

-- A key's row decoded: what each NULL of a message row means (MessageRows), and the rules of
-- its times. expires_at is COALESCE(expires_at, purge_after), as rules::key_row::in_sql says.
CREATE TYPE idem.key_row AS (
    fence bigint,
    state "char",
    request_hash bytea,
    attempt integer,
    response_code integer,
    response_body jsonb,
    lease_expires_at timestamptz,
    expires_at timestamptz,
    ttl_us bigint,
    checkpoint_phase text,
    checkpoint_data jsonb
);

-- The key's row (NULL when absent), locked FOR NO KEY UPDATE when for_update (waiting for a
-- transaction changing it). A row only a bug or a hand edit can make is refused loudly.
CREATE FUNCTION idem.read_key(tenant text, key text, for_update boolean) RETURNS idem.key_row
LANGUAGE plpgsql
AS $$
DECLARE
    k idem.keys;
    r idem.key_row;
BEGIN
    IF for_update THEN
        SELECT * INTO k FROM idem.keys AS t
        WHERE t.tenant OPERATOR(pg_catalog.=) read_key.tenant AND t.key OPERATOR(pg_catalog.=) read_key.key
        FOR NO KEY UPDATE OF t;
    ELSE
        SELECT * INTO k FROM idem.keys AS t
        WHERE t.tenant OPERATOR(pg_catalog.=) read_key.tenant AND t.key OPERATOR(pg_catalog.=) read_key.key;
    END IF;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF k.state IS NULL OR k.state::pg_catalog.text NOT IN ('p', 'c', 'f') THEN
        PERFORM idem.impossible(pg_catalog.format('state %s', pg_catalog.quote_nullable(k.state::pg_catalog.text)));
    END IF;
    IF k.expires_at IS NULL THEN
        -- a message row
        IF k.state OPERATOR(pg_catalog.<>) 'c'::"char" OR k.ttl IS NOT NULL THEN
            PERFORM idem.impossible(pg_catalog.format('expires_at NULL in a row in state %s', k.state));
        END IF;
        r := ROW(COALESCE(k.fence, 0), k.state,
                 COALESCE(k.request_hash, idem.stored_request_hash('')),
                 COALESCE(k.attempt, 1), k.response_code, k.response_body,
                 k.lease_expires_at, k.purge_after, NULL, k.checkpoint_phase, k.checkpoint_data);
        RETURN r;
    END IF;
    IF k.fence IS NULL OR k.request_hash IS NULL OR k.attempt IS NULL OR k.ttl IS NULL THEN
        PERFORM idem.impossible('NULL in a column of a whole row');
    END IF;
    IF pg_catalog.octet_length(k.request_hash) OPERATOR(pg_catalog.<>) 16 THEN
        PERFORM idem.impossible(pg_catalog.format('request hash of %s bytes', pg_catalog.octet_length(k.request_hash)));
    END IF;
    r := ROW(k.fence, k.state, k.request_hash, k.attempt, k.response_code, k.response_body,
             k.lease_expires_at, k.expires_at, idem.interval_us(k.ttl)::pg_catalog.int8,
             k.checkpoint_phase, k.checkpoint_data);
    RETURN r;
END
$$;

CREATE FUNCTION idem.impossible(what text) RETURNS void
LANGUAGE sql
AS $$
    SELECT idem.raise_error('XX000', 'pg_idem internal error: reading idem.keys',
        pg_catalog.format('unexpected %s', what),
        'This is a bug in pg_idem; please report it with the statement that caused it.')
$$;

-- A duration in microseconds as an interval: the one conversion of a lease or a ttl (the native
-- edition's Micros) to what timestamptz arithmetic and idem.keys.ttl take. Inlined where it is
-- called (an IMMUTABLE body around make_interval, which is IMMUTABLE).
CREATE FUNCTION idem.us_interval(duration_us bigint) RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$
    SELECT pg_catalog.make_interval(secs => duration_us::pg_catalog.float8 OPERATOR(pg_catalog./) 1000000)
$$;

-- `at` plus a duration in microseconds: the one way a lease or a ttl is added to a time.
CREATE FUNCTION idem.after(at timestamptz, duration_us bigint) RETURNS timestamptz
-- STABLE, as timestamptz + interval is: a function declared IMMUTABLE around a STABLE body is
-- never inlined, and from PL/pgSQL it is then parsed and planned in every transaction
LANGUAGE sql STABLE
AS $$
    SELECT at OPERATOR(pg_catalog.+) idem.us_interval(duration_us)
$$;

-- Whether this transaction holds the key's lock already (it claimed the key, or proved its
-- fence): only asked in the rare case where the answer depends on it (its own attempt, past its
-- lease), because pg_locks is not cheap. A transaction that claimed the key while another role
-- held its lock (idem.key_held_elsewhere) holds the row, not the lock: its own attempt, past its
-- lease in the same transaction, is then taken over rather than answered in_progress.
CREATE FUNCTION idem.holds_key_lock(lock_id bigint) RETURNS boolean
LANGUAGE sql
AS $$
    SELECT EXISTS (
        SELECT FROM pg_catalog.pg_locks AS l
        WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
          AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
          AND l.granted AND l.objsubid OPERATOR(pg_catalog.=) 1
          AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database AS d
                                                 WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
          AND l.classid::pg_catalog.int8 OPERATOR(pg_catalog.=) ((lock_id OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.&) 4294967295)
          AND l.objid::pg_catalog.int8 OPERATOR(pg_catalog.=) (lock_id OPERATOR(pg_catalog.&) 4294967295))
$$;

-- Whether another transaction holds the key, asked when its key lock is taken: the lock is in
-- pg_advisory_lock(bigint)'s space, where any role may take any id (key_lock_id is keyed with a
-- secret no other role reads, but pg_locks shows every held id to every role), so for a key
-- that has a row a held lock only says "look at the row", which only pg_idem's owner can lock or
-- write. A row locked by another
-- transaction (SKIP LOCKED passes it) is a transaction claiming or finishing the key: held.
-- Otherwise the row is locked now, by this transaction, and the caller goes on. A key without a
-- row is held: a transaction is inserting it (or another role holds its lock: tests/
-- sql_edition_security.rs, docs/editions.md); going on there would race the lock's holder to the
-- insert, and the loser would wait for the winner's whole transaction instead of answering.
CREATE FUNCTION idem.key_held_elsewhere(tenant text, key text, row_seen boolean) RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT row_seen THEN
        RETURN true;
    END IF;
    PERFORM FROM idem.keys AS k
     WHERE k.tenant OPERATOR(pg_catalog.=) key_held_elsewhere.tenant
       AND k.key OPERATOR(pg_catalog.=) key_held_elsewhere.key
       FOR NO KEY UPDATE OF k SKIP LOCKED;
    -- not found: locked by another transaction, or gone since it was read (purged, forgotten,
    -- released), which is a key without a row
    RETURN NOT FOUND;
END
$$;

-- 25006 as the executor raises it for a write in a read-only transaction (a hot standby).
CREATE FUNCTION idem.prevent_if_read_only(command text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
        PERFORM idem.raise_error('25006', pg_catalog.format('cannot execute %s in a read-only transaction', command), NULL, NULL);
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Claims (src/rules/claims.rs, src/store/spi.rs's claim)
-- ---------------------------------------------------------------------------------------------

-- The claim of a key; its answer as idem_claim's result row. The hot paths (a replay, a new
-- key) run as few statements and calls as they can: a PL/pgSQL call or a statement costs
-- microseconds each, which is most of what the SQL edition spends.
CREATE FUNCTION idem.claim(tenant text, key text, request_hash bytea, lease_us bigint, ttl_us bigint,
                           reject_stale_uuidv7 boolean, now timestamptz)
RETURNS @extschema@.idem_claim_result
LANGUAGE plpgsql
AS $$
-- the ON CONFLICT below names the primary key's columns, not the constraint: a DBA's rebuilt
-- primary key (REINDEX CONCURRENTLY, a new index swapped in) keeps its columns, not always
-- its name; the columns are the table's, not this function's parameters of the same names
#variable_conflict use_column
DECLARE
    -- the key's row, decoded as idem.read_key decodes it (what a message row's NULLs mean)
    k_found boolean;
    k_fence bigint;
    k_state "char";
    k_hash bytea;
    k_attempt integer;
    k_code integer;
    k_body jsonb;
    k_lease timestamptz;
    k_expires timestamptz;
    k_ttl interval;
    k_odd boolean;
    locked boolean := false;
    mine boolean := false;
    takeover boolean;
    new_fence bigint;
    new_attempt integer;
    lease_at timestamptz;
    purge_at timestamptz;
    phase text;
    data jsonb;
    result @extschema@.idem_claim_result;
BEGIN
    -- idem.keys in the mode its writes need, before the first read: a read's weaker lock
    -- upgraded at the write deadlocks with REINDEX, VACUUM FULL or CLUSTER queued in between
    -- (the native engine opens idem.keys in this mode too)
    LOCK TABLE idem.keys IN ROW EXCLUSIVE MODE;
    -- the native claim's rounds (rules/src/claims.rs: a read, and a write when the key is to
    -- be taken) and one more: the first read here takes no key lock, and a row it found is read
    -- again once the lock is held
    FOR round IN 0..@CLAIM_ROUNDS@ LOOP
        -- read first, without the key lock: answers that need no write (replays, live leases,
        -- mismatches) take none; once the lock is held, read again with the row locked
        IF locked THEN
            SELECT COALESCE(k.fence, 0), k.state, COALESCE(k.request_hash, E'\\xe3b0c44298fc1c149afbf4c8996fb924'::pg_catalog.bytea),
                   COALESCE(k.attempt, 1), k.response_code, k.response_body, k.lease_expires_at,
                   COALESCE(k.expires_at, k.purge_after), k.ttl,
                   k.state OPERATOR(pg_catalog.<>) ALL ('{p,c,f}'::"char"[])
                   OR (k.expires_at IS NULL AND (k.state OPERATOR(pg_catalog.<>) 'c' OR k.ttl IS NOT NULL))
                   OR (k.expires_at IS NOT NULL AND (k.fence IS NULL OR k.attempt IS NULL OR k.ttl IS NULL
                       OR pg_catalog.octet_length(k.request_hash) IS DISTINCT FROM 16))
              INTO k_fence, k_state, k_hash, k_attempt, k_code, k_body, k_lease, k_expires, k_ttl, k_odd
              FROM idem.keys AS k
             WHERE k.tenant OPERATOR(pg_catalog.=) claim.tenant AND k.key OPERATOR(pg_catalog.=) claim.key
               FOR NO KEY UPDATE OF k;
        ELSE
            SELECT COALESCE(k.fence, 0), k.state, COALESCE(k.request_hash, E'\\xe3b0c44298fc1c149afbf4c8996fb924'::pg_catalog.bytea),
                   COALESCE(k.attempt, 1), k.response_code, k.response_body, k.lease_expires_at,
                   COALESCE(k.expires_at, k.purge_after), k.ttl,
                   k.state OPERATOR(pg_catalog.<>) ALL ('{p,c,f}'::"char"[])
                   OR (k.expires_at IS NULL AND (k.state OPERATOR(pg_catalog.<>) 'c' OR k.ttl IS NOT NULL))
                   OR (k.expires_at IS NOT NULL AND (k.fence IS NULL OR k.attempt IS NULL OR k.ttl IS NULL
                       OR pg_catalog.octet_length(k.request_hash) IS DISTINCT FROM 16))
              INTO k_fence, k_state, k_hash, k_attempt, k_code, k_body, k_lease, k_expires, k_ttl, k_odd
              FROM idem.keys AS k
             WHERE k.tenant OPERATOR(pg_catalog.=) claim.tenant AND k.key OPERATOR(pg_catalog.=) claim.key;
        END IF;
        k_found := FOUND;
        IF k_found AND k_odd THEN
            -- impossible data: idem.read_key says what, loudly
            PERFORM idem.read_key(tenant, key, false);
        END IF;
        -- the rule of src/rules/claims.rs's plan (the empty hash above is the message rows')
        IF k_found AND k_state OPERATOR(pg_catalog.=) 'p' AND k_hash OPERATOR(pg_catalog.=) claim.request_hash
           AND NOT locked AND NOT (k_lease IS NOT NULL AND now OPERATOR(pg_catalog.<=) k_lease
                                   AND now OPERATOR(pg_catalog.<=) k_expires) THEN
            -- its lease or its life has passed: a takeover, unless it is this transaction's own
            mine := idem.holds_key_lock(idem.key_lock_id(tenant, key));
        END IF;
        takeover := false;
        IF k_found AND mine AND k_state OPERATOR(pg_catalog.=) 'p' AND k_hash OPERATOR(pg_catalog.=) claim.request_hash THEN
            RETURN idem.claim_answer('in_progress', ROW(k_fence, k_state, k_hash, k_attempt, k_code, k_body, k_lease, k_expires, NULL, NULL, NULL)::idem.key_row);
        ELSIF k_found AND now OPERATOR(pg_catalog.<=) k_expires THEN
            IF k_hash OPERATOR(pg_catalog.<>) claim.request_hash THEN
                result := ROW('mismatch', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
                RETURN result;
            ELSIF k_state OPERATOR(pg_catalog.<>) 'p' THEN
                result := ROW(CASE WHEN k_state OPERATOR(pg_catalog.=) 'f' THEN 'failed' ELSE 'completed' END,
                              NULL, k_attempt, k_code, k_body, NULL, k_expires, NULL, NULL);
                RETURN result;
            ELSIF k_lease IS NOT NULL AND now OPERATOR(pg_catalog.<=) k_lease THEN
                result := ROW('in_progress', NULL, k_attempt, NULL, NULL, k_lease, k_expires, NULL, NULL);
                RETURN result;
            END IF;
            takeover := true;
        ELSIF reject_stale_uuidv7 AND idem.is_stale_uuidv7(key, ttl_us, now) THEN
            result := ROW('stale_key', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
            RETURN result;
        END IF;
        IF NOT locked THEN
            PERFORM idem.prevent_if_read_only('INSERT');
            -- held, the key lock says that a transaction is claiming or finishing this key
            -- right now, or that some role took an id it saw in pg_locks:
            -- idem.key_held_elsewhere asks the row
            IF NOT pg_catalog.pg_try_advisory_xact_lock(idem.key_lock_id(tenant, key)) THEN
                IF idem.key_held_elsewhere(tenant, key, k_found) THEN
                    result := ROW('in_progress', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
                    RETURN result;
                END IF;
            END IF;
            locked := true;
            IF k_found THEN
                -- only a purge can be changing the row now: decide on what it leaves
                CONTINUE;
            END IF;
            -- no row: the insert below finds one committed meanwhile, if any
        END IF;
        new_attempt := CASE WHEN takeover THEN k_attempt OPERATOR(pg_catalog.+) 1 ELSE 1 END;
        new_fence := pg_catalog.nextval('idem.fence_seq'::pg_catalog.regclass);
        IF k_found AND new_fence OPERATOR(pg_catalog.<=) k_fence THEN
            -- the row replaced holds a fence above the sequence (rows restored without raising
            -- it): a fence is always above the one it replaces, as natively
            new_fence := pg_catalog.setval('idem.fence_seq'::pg_catalog.regclass, k_fence OPERATOR(pg_catalog.+) 1);
        END IF;
        lease_at := idem.after(now, lease_us);
        purge_at := idem.after(now, ttl_us);
        IF NOT k_found THEN
            INSERT INTO idem.keys AS k (tenant, key, fence, attempt, state, request_hash, claimed_at,
                                        lease_expires_at, expires_at, purge_after, ttl)
            VALUES (claim.tenant, claim.key, new_fence, new_attempt, 'p', claim.request_hash, now, lease_at,
                    GREATEST(purge_at, lease_at), purge_at,
                    idem.us_interval(ttl_us))
            ON CONFLICT (tenant, key) DO NOTHING
            RETURNING k.checkpoint_phase, k.checkpoint_data INTO phase, data;
        ELSE
            UPDATE idem.keys AS k
               SET fence = new_fence, attempt = new_attempt, state = 'p',
                   request_hash = claim.request_hash, claimed_at = now, lease_expires_at = lease_at,
                   expires_at = GREATEST(purge_at, lease_at),
                   purge_after = LEAST(k.purge_after, purge_at),
                   ttl = idem.us_interval(ttl_us),
                   response_code = NULL, response_body = NULL,
                   -- only a takeover hands the last checkpoint on
                   checkpoint_phase = CASE WHEN takeover THEN k.checkpoint_phase END,
                   checkpoint_data = CASE WHEN takeover THEN k.checkpoint_data END
             WHERE k.tenant OPERATOR(pg_catalog.=) claim.tenant AND k.key OPERATOR(pg_catalog.=) claim.key
            RETURNING k.checkpoint_phase, k.checkpoint_data INTO phase, data;
        END IF;
        IF FOUND THEN
            IF pg_catalog.random() OPERATOR(pg_catalog.<) 0.125 THEN
                PERFORM idem.purge_in_passing(now, tenant, 16);
            END IF;
            result := ROW('claimed', new_fence, new_attempt, NULL, NULL, lease_at,
                          GREATEST(purge_at, lease_at), phase, data);
            RETURN result;
        END IF;
        -- inserted and committed by another transaction since the first read (it held the key
        -- lock then), or purged meanwhile: look again, with the lock
    END LOOP;
    -- with the key held, every round found no row to take and wrote none: a trigger or a
    -- rule drops pg_idem's writes
    PERFORM idem.dropped_write('idem_claim', tenant, key);
    RETURN NULL;
END
$$;

-- Whether a claim of an absent UUIDv7 key older than its ttl is refused (reject_stale_uuidv7).
CREATE FUNCTION idem.is_stale_uuidv7(key text, ttl_us bigint, now timestamptz) RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT COALESCE(pg_catalog.to_timestamp(idem.uuid_v7_unix_ms(key)::pg_catalog.float8 OPERATOR(pg_catalog./) 1000)
               OPERATOR(pg_catalog.<) (now OPERATOR(pg_catalog.-) idem.us_interval(ttl_us)),
           false)
$$;

-- The row idem_claim returns for an answer that wrote nothing (src/sql_api/calls.rs ClaimRow):
-- never the holder's fence, which would let this caller act in the holder's name.
CREATE FUNCTION idem.claim_answer(outcome text, r idem.key_row) RETURNS @extschema@.idem_claim_result
LANGUAGE plpgsql
AS $$
DECLARE
    result @extschema@.idem_claim_result;
BEGIN
    IF outcome OPERATOR(pg_catalog.=) 'replay' THEN
        result := ROW(CASE WHEN r.state OPERATOR(pg_catalog.=) 'f'::"char" THEN 'failed' ELSE 'completed' END,
                      NULL, r.attempt, r.response_code, r.response_body, NULL, r.expires_at, NULL, NULL);
    ELSIF outcome OPERATOR(pg_catalog.=) 'in_progress' THEN
        result := ROW('in_progress', NULL, r.attempt, NULL, NULL, r.lease_expires_at, r.expires_at, NULL, NULL);
    ELSE
        result := ROW(outcome, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    END IF;
    RETURN result;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Operations under a fence (src/rules/fenced.rs)
-- ---------------------------------------------------------------------------------------------

-- Locks the key (its lock, then its row), checks that `fence` holds it, and applies the
-- operation: 'complete', 'fail', 'heartbeat', 'checkpoint', 'release' or 'assert'. Returns the
-- row's expires_at and lease_expires_at after it.
CREATE FUNCTION idem.fenced(function text, tenant text, key text, fence bigint, operation text,
                            now timestamptz, response_code integer DEFAULT NULL,
                            response_body jsonb DEFAULT NULL, lease_us bigint DEFAULT NULL,
                            phase text DEFAULT NULL, data jsonb DEFAULT NULL,
                            OUT expires_at timestamptz, OUT lease_expires_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    r idem.key_row;
    locked boolean;
    placed boolean;
BEGIN
    -- idem.keys in the mode its writes need, before the first read: a read's weaker lock
    -- upgraded at the write deadlocks with REINDEX, VACUUM FULL or CLUSTER queued in between
    -- (the native engine opens idem.keys in this mode too)
    LOCK TABLE idem.keys IN ROW EXCLUSIVE MODE;
    IF pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
        PERFORM idem.prevent_if_read_only(CASE operation WHEN 'release' THEN 'DELETE'
            WHEN 'assert' THEN 'SELECT FOR NO KEY UPDATE' ELSE 'UPDATE' END);
    END IF;
    -- the key lock, for claims to see (idem.key_held_elsewhere): taken if free, never waited for,
    -- since a role can take an id it saw in pg_locks; the row lock below is what waits for
    -- whoever is claiming or finishing the key
    locked := pg_catalog.pg_try_advisory_xact_lock(idem.key_lock_id(tenant, key));
    IF operation IN ('complete', 'fail') THEN
        -- the usual case in one statement: the key held by this fence, a whole row in progress
        -- (one read_key accepts). Anything else (and a write a trigger drops) changes nothing
        -- here, and the path below says what is wrong.
        UPDATE idem.keys AS k
           SET state = CASE operation WHEN 'complete' THEN 'c'::"char" ELSE 'f'::"char" END,
               response_code = fenced.response_code, response_body = fenced.response_body,
               lease_expires_at = NULL,
               expires_at = idem.after(fenced.now, idem.interval_us(k.ttl)::pg_catalog.int8),
               checkpoint_phase = NULL, checkpoint_data = NULL
         WHERE k.tenant OPERATOR(pg_catalog.=) fenced.tenant AND k.key OPERATOR(pg_catalog.=) fenced.key
           AND k.fence OPERATOR(pg_catalog.=) fenced.fence AND k.state OPERATOR(pg_catalog.=) 'p'::"char"
           AND k.expires_at IS NOT NULL AND k.request_hash IS NOT NULL AND k.attempt IS NOT NULL
           AND k.ttl IS NOT NULL AND pg_catalog.octet_length(k.request_hash) OPERATOR(pg_catalog.=) 16
        RETURNING k.expires_at INTO expires_at;
        IF FOUND THEN
            lease_expires_at := NULL;
            RETURN;
        END IF;
    END IF;
    r := idem.read_key(tenant, key, true);
    IF r.state IS NULL AND NOT locked THEN
        -- no row, and the lock held: a claim may be inserting the key right now, which no read
        -- sees and no row lock waits for. An insert of the key waits for it, as natively the
        -- call waits for the claiming transaction (only pg_idem's owner writes idem.keys): a row
        -- it committed is read again; the row the insert leaves if there was none is deleted,
        -- and the key does not exist (tests/isolation/specs/claim-rollback.spec)
        INSERT INTO idem.keys AS k (tenant, key, state, purge_after)
        VALUES (fenced.tenant, fenced.key, 'c', pg_catalog.clock_timestamp())
        ON CONFLICT DO NOTHING
        RETURNING true INTO placed;
        IF placed THEN
            DELETE FROM idem.keys AS k
             WHERE k.tenant OPERATOR(pg_catalog.=) fenced.tenant AND k.key OPERATOR(pg_catalog.=) fenced.key;
        ELSE
            r := idem.read_key(tenant, key, true);
        END IF;
    END IF;
    IF r.state IS NULL THEN
        PERFORM idem.raise_error('P0002',
            pg_catalog.format('%s: key "%s" of tenant "%s" does not exist', function, key, tenant),
            pg_catalog.format('No key holds fence %s: it was never claimed, or it was released, forgotten or purged since.', fence),
            'Claim the key with idem_claim() first; a released or purged key must be claimed again.');
    END IF;
    IF r.fence OPERATOR(pg_catalog.<>) fenced.fence OR r.state OPERATOR(pg_catalog.<>) 'p'::"char" THEN
        PERFORM idem.raise_error('55000',
            pg_catalog.format('%s: lease lost on key "%s" of tenant "%s"', function, key, tenant),
            CASE r.state
                WHEN 'c'::"char" THEN pg_catalog.format('The key is already completed; fence %s cannot change it.', fence)
                WHEN 'f'::"char" THEN pg_catalog.format('The key already holds a final error; fence %s cannot change it.', fence)
                ELSE pg_catalog.format('Fence %s does not hold this key: another attempt holds it (after a takeover or a new claim), or it never was this key''s fence.', fence)
            END,
            'Stop this attempt and roll back its transaction; the attempt that holds the key now, or the stored response, is authoritative.');
    END IF;
    expires_at := r.expires_at;
    lease_expires_at := r.lease_expires_at;
    CASE operation
    WHEN 'complete', 'fail' THEN
        -- a final outcome is replayed for its ttl from now; the lease and the checkpoint go
        expires_at := idem.after(now, r.ttl_us);
        lease_expires_at := NULL;
        UPDATE idem.keys AS k
           SET state = CASE operation WHEN 'complete' THEN 'c'::"char" ELSE 'f'::"char" END,
               response_code = fenced.response_code, response_body = fenced.response_body,
               lease_expires_at = NULL, expires_at = fenced.expires_at,
               checkpoint_phase = NULL, checkpoint_data = NULL
         WHERE k.tenant OPERATOR(pg_catalog.=) fenced.tenant AND k.key OPERATOR(pg_catalog.=) fenced.key;
    WHEN 'heartbeat' THEN
        -- a sign of life keeps the key for its ttl from now, never less than its lease
        lease_expires_at := idem.after(now, lease_us);
        expires_at := GREATEST(r.expires_at, lease_expires_at, idem.after(now, r.ttl_us));
        UPDATE idem.keys AS k
           SET lease_expires_at = fenced.lease_expires_at, expires_at = fenced.expires_at
         WHERE k.tenant OPERATOR(pg_catalog.=) fenced.tenant AND k.key OPERATOR(pg_catalog.=) fenced.key;
    WHEN 'checkpoint' THEN
        expires_at := GREATEST(r.expires_at, idem.after(now, r.ttl_us));
        UPDATE idem.keys AS k
           SET checkpoint_phase = phase, checkpoint_data = data, expires_at = fenced.expires_at
         WHERE k.tenant OPERATOR(pg_catalog.=) fenced.tenant AND k.key OPERATOR(pg_catalog.=) fenced.key;
    WHEN 'release' THEN
        DELETE FROM idem.keys AS k
         WHERE k.tenant OPERATOR(pg_catalog.=) fenced.tenant AND k.key OPERATOR(pg_catalog.=) fenced.key;
    WHEN 'assert' THEN
        NULL; -- locked already
    END CASE;
    IF operation OPERATOR(pg_catalog.<>) 'assert' AND NOT FOUND THEN
        -- the row is locked and held by this fence: only a trigger or a rule can drop the write
        PERFORM idem.dropped_write(function, tenant, key);
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Consumed messages (src/rules/consumes.rs, src/store/spi.rs's consume)
-- ---------------------------------------------------------------------------------------------

-- Records a message as processed unless it was: true when it is new. The insert of a new
-- message, or the row lock, waits for a transaction claiming, finishing or consuming the key
-- (until it ends), and the decision is made on what it left. A new message is a narrow row
-- (sql/schema.sql): its key, state 'c' and its expiry in purge_after, every other column NULL.
CREATE FUNCTION idem.consume(tenant text, key text, ttl_us bigint, now timestamptz) RETURNS boolean
LANGUAGE plpgsql
AS $$
-- the ON CONFLICT below names the primary key's columns, not the constraint: a DBA's rebuilt
-- primary key (REINDEX CONCURRENTLY, a new index swapped in) keeps its columns, not always
-- its name; the columns are the table's, not this function's parameters of the same names
#variable_conflict use_column
DECLARE
    lock_id bigint := idem.key_lock_id(tenant, key);
    r idem.key_row;
    mine boolean := false;
    new_attempt integer;
    expiry timestamptz := idem.after(now, ttl_us);
    inserted boolean;
BEGIN
    -- idem.keys in the mode its writes need, before the first read: a read's weaker lock
    -- upgraded at the write deadlocks with REINDEX, VACUUM FULL or CLUSTER queued in between
    -- (the native engine opens idem.keys in this mode too)
    LOCK TABLE idem.keys IN ROW EXCLUSIVE MODE;
    LOOP
        r := idem.read_key(tenant, key, false);
        IF r.state OPERATOR(pg_catalog.=) 'p'::"char" THEN
            -- whether this transaction held the key lock before: its own attempt, then (only
            -- asked here: the answer depends on it for an attempt in progress only)
            mine := idem.holds_key_lock(lock_id);
        ELSIF r.state IS NOT NULL AND now OPERATOR(pg_catalog.<=) r.expires_at THEN
            -- processed already: nothing any transaction holding the key lock could change
            RETURN false;
        END IF;
        IF NOT pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
            -- the key lock for claims to see, never waited for (pg_locks shows its id to all):
            -- the insert and the locked read below wait for whoever is claiming, finishing or
            -- consuming the key, and decide on what it left
            PERFORM pg_catalog.pg_try_advisory_xact_lock(lock_id);
            IF r.state IS NULL THEN
                -- a new message (the usual case): no second read. A row inserted since the read
                -- above (or a write a trigger drops) makes this insert do nothing, and the path
                -- below decides on what there is.
                INSERT INTO idem.keys AS k (tenant, key, state, purge_after)
                VALUES (consume.tenant, consume.key, 'c', expiry)
                ON CONFLICT (tenant, key) DO NOTHING;
                IF FOUND THEN
                    IF pg_catalog.random() OPERATOR(pg_catalog.<) 0.125 THEN
                        PERFORM idem.purge_in_passing(now, tenant, 16);
                    END IF;
                    RETURN true;
                END IF;
            END IF;
            r := idem.read_key(tenant, key, true);
        END IF;
        -- the rule of src/rules/consumes.rs's plan_consume
        new_attempt := NULL;
        IF r.state OPERATOR(pg_catalog.=) 'p'::"char" AND mine THEN
            PERFORM idem.consume_held(tenant, key, r.lease_expires_at, true);
        END IF;
        IF r.state IS NOT NULL AND now OPERATOR(pg_catalog.<=) r.expires_at THEN
            IF r.state OPERATOR(pg_catalog.<>) 'p'::"char" THEN
                RETURN false;
            END IF;
            IF r.lease_expires_at IS NOT NULL AND now OPERATOR(pg_catalog.<=) r.lease_expires_at THEN
                PERFORM idem.consume_held(tenant, key, r.lease_expires_at, false);
            END IF;
            -- a takeover of an attempt of idem_claim whose lease passed counts its attempts
            new_attempt := r.attempt OPERATOR(pg_catalog.+) 1;
        END IF;
        IF pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
            PERFORM idem.prevent_if_read_only('INSERT');
        END IF;
        IF r.state IS NULL THEN
            INSERT INTO idem.keys AS k (tenant, key, state, purge_after)
            VALUES (consume.tenant, consume.key, 'c', expiry)
            ON CONFLICT (tenant, key) DO NOTHING
            RETURNING true INTO inserted;
            IF NOT FOUND AND NOT EXISTS (SELECT FROM idem.keys AS k
                                          WHERE k.tenant OPERATOR(pg_catalog.=) consume.tenant
                                            AND k.key OPERATOR(pg_catalog.=) consume.key) THEN
                -- no conflict and no row: a trigger dropped the insert (looking again would
                -- loop for ever)
                PERFORM idem.dropped_write('idem_consume', tenant, key);
            END IF;
        ELSE
            UPDATE idem.keys AS k
               SET state = 'c', lease_expires_at = NULL, response_code = NULL, response_body = NULL,
                   checkpoint_phase = NULL, checkpoint_data = NULL, expires_at = NULL,
                   purge_after = expiry, fence = NULL, attempt = new_attempt,
                   request_hash = NULL, claimed_at = NULL, ttl = NULL
             WHERE k.tenant OPERATOR(pg_catalog.=) consume.tenant AND k.key OPERATOR(pg_catalog.=) consume.key;
        END IF;
        IF FOUND THEN
            IF pg_catalog.random() OPERATOR(pg_catalog.<) 0.125 THEN
                PERFORM idem.purge_in_passing(now, tenant, 16);
            END IF;
            RETURN true;
        END IF;
        -- inserted by another node meanwhile, or purged: look again
    END LOOP;
END
$$;

-- 55000: a write of pg_idem's that a trigger or a rule on idem.keys dropped (a BEFORE trigger
-- returning NULL, a DO INSTEAD NOTHING rule): refused rather than reported as done.
CREATE FUNCTION idem.dropped_write(function text, tenant text, key text) RETURNS void
LANGUAGE sql
AS $$
    SELECT idem.raise_error('55000',
        pg_catalog.format('%s: idem.keys did not take the write of key "%s" of tenant "%s"', function, key, tenant),
        'A trigger or a rule on idem.keys dropped the row pg_idem wrote.',
        'Drop the trigger or rule on idem.keys (pg_idem''s table takes only its own writes).')
$$;

-- 55P03: idem_consume of a key an attempt of idem_claim holds (mine: this transaction's).
CREATE FUNCTION idem.consume_held(tenant text, key text, lease_expires_at timestamptz, mine boolean)
RETURNS void
LANGUAGE sql
AS $$
    SELECT idem.raise_error('55P03',
        pg_catalog.format('idem_consume: key "%s" of tenant "%s" is held by an attempt in progress', key, tenant),
        CASE WHEN mine THEN 'This transaction claimed it with idem_claim and has not completed it.'
             WHEN lease_expires_at IS NOT NULL
             THEN pg_catalog.format('An attempt claimed it with idem_claim; its lease runs until %s.', lease_expires_at)
             ELSE 'An attempt claimed it with idem_claim.' END,
        'Do not acknowledge the message: let it be redelivered later (once the lease has passed, idem_consume takes the key over), or finish the attempt with idem_complete.')
$$;

-- ---------------------------------------------------------------------------------------------
-- The purge (src/store/purge.rs's purge_batch_sql)
-- ---------------------------------------------------------------------------------------------

-- One batch: locks up to `batch` keys whose purge_after has passed (SKIP LOCKED: never waits),
-- deletes the purgeable ones (expired, no live lease) and moves purge_after up for the others
-- (keys whose expiry moved since). Only the tenants in `tenants` when it is not NULL. Returns
-- (looked at, deleted).
CREATE FUNCTION idem.purge_batch(now timestamptz, batch integer, tenants text[],
                                 finished_only boolean,
                                 OUT scanned bigint, OUT deleted bigint)
LANGUAGE plpgsql
AS $$
-- PL/pgSQL keeps the statements' plans; a SQL function would be planned at every call. Row by
-- row by ctid, a TID scan whatever the table's size: a kept plan of `ctid = ANY (...)`, made
-- while the table was small, is a sequential scan of the whole table at every call.
DECLARE
    candidate record;
BEGIN
    scanned := 0;
    deleted := 0;
    FOR candidate IN
        SELECT c.ctid AS row_id,
               (COALESCE(c.expires_at, c.purge_after) OPERATOR(pg_catalog.<) now
                AND (c.lease_expires_at IS NULL OR c.lease_expires_at OPERATOR(pg_catalog.<) now)) AS purgeable
          FROM idem.keys AS c
         WHERE c.purge_after OPERATOR(pg_catalog.<) now
           AND (tenants IS NULL OR c.tenant OPERATOR(pg_catalog.=) ANY (tenants))
           AND (NOT finished_only OR c.state OPERATOR(pg_catalog.<>) 'p')
         ORDER BY c.purge_after LIMIT batch
           FOR UPDATE SKIP LOCKED
    LOOP
        scanned := scanned OPERATOR(pg_catalog.+) 1;
        IF candidate.purgeable THEN
            DELETE FROM idem.keys AS k WHERE k.ctid OPERATOR(pg_catalog.=) candidate.row_id;
            IF FOUND THEN
                deleted := deleted OPERATOR(pg_catalog.+) 1;
            END IF;
        ELSE
            UPDATE idem.keys AS k
               SET purge_after = LEAST(k.expires_at, now OPERATOR(pg_catalog.+) k.ttl)
             WHERE k.ctid OPERATOR(pg_catalog.=) candidate.row_id;
        END IF;
    END LOOP;
END
$$;

-- The purge the calls do in passing, as the SQL edition has no background worker: a call that
-- wrote a key deletes, one time in 8, up to 16 expired keys (2 per call on average, never
-- more than 16; a batch, for each key it wrote one time in 8, 16 more in one pass: `batch`),
-- so expired keys go at least as fast as calls add keys and the table stays bounded with
-- nothing scheduled. Only finished keys (completed, failed, consumed): an attempt
-- in progress may be the caller's own, which stays its own however long it has run (and
-- abandoned attempts are few; idem_purge() takes them). It never waits (SKIP LOCKED) and never
-- pays for a backlog;
-- the rows it deletes stay locked until the caller's transaction ends, so a claim of one of
-- those expired keys in another transaction waits for that end. The owner turns it off with
-- pg_idem.purge_in_passing in idem.settings (then schedule idem_purge(), with pg_cron say).
CREATE FUNCTION idem.purge_in_passing(now timestamptz, tenant text, batch integer) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- the callers call it one time in eight (random() < 0.125): the check costs nothing then
    IF COALESCE((SELECT s.value::pg_catalog.bool FROM idem.settings AS s
                  WHERE s.name OPERATOR(pg_catalog.=) 'pg_idem.purge_in_passing'), true)
       -- a DBA's DO ALSO rule refuses purge_batch's data-modifying WITH (0A000), a publication
       -- without replica identity or with a row filter its DELETE and UPDATE (55000, 42P10):
       -- a call must not fail for a purge it was not asked for (idem_purge() reports them)
       AND NOT (SELECT c.relhasrules FROM pg_catalog.pg_class AS c
                 WHERE c.oid OPERATOR(pg_catalog.=) 'idem.keys'::pg_catalog.regclass)
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_publication_tables AS p
                        WHERE p.schemaname OPERATOR(pg_catalog.=) 'idem'
                          AND p.tablename OPERATOR(pg_catalog.=) 'keys') THEN
        -- with tenant grants on, only the caller's tenant: it locks what it deletes until the
        -- caller's transaction ends, and must hold no other tenant's keys
        PERFORM idem.purge_batch(now, batch,
            CASE WHEN (idem.owner_settings()).tenant_grants THEN ARRAY[tenant] END, true);
    END IF;
END
$$;

-- Purges expired keys in batches until none is left (or max_rows are deleted).
CREATE FUNCTION idem.purge(max_rows bigint, tenants text[], now timestamptz) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    total bigint := 0;
    batch integer;
    b record;
BEGIN
    LOOP
        batch := LEAST(1000, COALESCE(max_rows OPERATOR(pg_catalog.-) total, 1000))::pg_catalog.int4;
        EXIT WHEN batch OPERATOR(pg_catalog.<=) 0;
        b := idem.purge_batch(now, batch, tenants, false);
        total := total OPERATOR(pg_catalog.+) b.deleted;
        -- a batch that deleted nothing has only rows whose expiry moved (re-armed now) or none
        EXIT WHEN b.scanned OPERATOR(pg_catalog.<) batch OR b.deleted OPERATOR(pg_catalog.=) 0;
    END LOOP;
    RETURN total;
END
$$;

-- The tenants whose expired keys the caller may purge: NULL for all of them.
CREATE FUNCTION idem.purgeable_tenants(tenant_grants boolean) RETURNS text[]
LANGUAGE plpgsql
AS $$
DECLARE
    role_name text := pg_catalog.current_setting('role');
BEGIN
    IF NOT tenant_grants THEN
        RETURN NULL;
    END IF;
    IF idem.in_restricted_operation() THEN
        -- a table owner's code run by maintenance (see idem.check_access): no tenant
        RETURN '{}';
    END IF;
    IF role_name OPERATOR(pg_catalog.=) 'none' THEN
        role_name := SESSION_USER;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname OPERATOR(pg_catalog.=) role_name AND r.rolsuper) THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY(SELECT DISTINCT g.tenant FROM idem.tenant_grants AS g
                  WHERE pg_catalog.pg_has_role(role_name, g.role::pg_catalog.oid, 'USAGE'));
END
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



-- A stream's watermark as the latest command left it. VOLATILE on purpose: idem_watermark is
-- declared STABLE (the native declaration), and a STABLE PL/pgSQL body reads with its calling
-- statement's snapshot, blind to an idem_reset_watermark earlier in the same statement, which
-- the native function sees.
CREATE FUNCTION idem.current_watermark(tenant text, stream text) RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT w.watermark FROM idem.watermarks AS w
     WHERE w.tenant OPERATOR(pg_catalog.=) current_watermark.tenant
       AND w.stream OPERATOR(pg_catalog.=) current_watermark.stream
$$;
