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
