-- pg_idem managed state. Applications never touch these relations directly: they call the
-- idem_* functions, which run with the extension owner's rights and a pinned search_path.

-- pg_idem reads every text argument and jsonb string as UTF-8 (tenants, keys, request bodies:
-- hashes, lock identities, length limits). In another server encoding those bytes mean
-- something else, and two different requests could hash alike, so refuse plainly instead.
DO $$
BEGIN
    IF pg_catalog.getdatabaseencoding() OPERATOR(pg_catalog.<>) 'UTF8' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'feature_not_supported',
            MESSAGE = 'pg_idem requires a database with encoding UTF8',
            DETAIL = pg_catalog.format('Database %I has encoding %s.',
                pg_catalog.current_database(), pg_catalog.getdatabaseencoding()),
            HINT = 'Create pg_idem in a database created with ENCODING ''UTF8'' (for example from template0); '
                'pg_idem hashes and compares keys and request bodies as UTF-8.';
    END IF;
END
$$;

CREATE SCHEMA idem;
COMMENT ON SCHEMA idem IS 'pg_idem managed state: use the idem_* functions, not these tables';
REVOKE ALL ON SCHEMA idem FROM PUBLIC;

-- The floor of the fencing tokens (src/store/fences.rs): every fence handed out is at most this
-- sequence's value, made durable (WAL flushed) before the fence is used, so a fence handed out
-- after a crash, a restart, a restore or an upgrade is larger than every one before. Without the
-- preload, the fences themselves.
CREATE SEQUENCE idem.fence_seq AS bigint MINVALUE 1 NO CYCLE;

-- A message recorded by idem_consume is a narrow row: it stores only its key, its state and its
-- expiry (in purge_after), and fence, claimed_at, expires_at, ttl, attempt and request_hash are
-- NULL (a NULL costs a bit of the null bitmap; these cost 53 bytes). Every other row has all
-- of them. What each NULL means is said once, in src/rules/key_row.rs (MessageRows).
CREATE TABLE idem.keys (
    -- The order is for the bytes on the page. The first eight columns hold everything a message
    -- row has, key last: the engine (src/pg/heap/write.rs) writes a row without its trailing NULLs,
    -- the way PostgreSQL keeps rows written before an ADD COLUMN, and a row of at most eight
    -- columns keeps its null bitmap in the header's spare byte, so a message row's data starts
    -- at byte 24 instead of 32 (the executor, which the SQL edition and the SPI path write
    -- through, forms every column: 8 bytes more). In each part the fixed-width columns come
    -- first: alignment pads a request row only before attempt, 0 to 3 bytes. A table updated
    -- from 0.4.0 keeps that release's order (an update rewrites no row); pg_idem finds its
    -- columns by name.
    purge_after      timestamptz NOT NULL,   -- indexed lower bound of the expiry, see below
    fence            bigint,                 -- NULL in a message row (a consume hands out none)
    claimed_at       timestamptz,            -- start of the current attempt; NULL in a message row
    expires_at       timestamptz,            -- past it the key counts as absent; NULL in a
                                             -- message row, whose expiry is purge_after
    ttl              interval,               -- how long a stored response is replayed; NULL in
                                             -- a message row (its expiry never moves again)
    state            "char"      NOT NULL,   -- 'p' in_progress, 'c' completed, 'f' failed
    -- tenant has the database's default collation, like an application's own tenant column:
    -- Citus colocates tables only when their distribution columns' collations match (the
    -- primary key compares bytes either way: default collations are deterministic)
    tenant           text        NOT NULL,
    key              text COLLATE "C" NOT NULL,
    -- the rest is NULL in a message row (attempt: unless it took over a lapsed claim)
    attempt          integer,                -- NULL in a message row: the first attempt
    response_code    integer,
    lease_expires_at timestamptz,            -- NULL once completed or failed
    request_hash     bytea,                  -- first 16 bytes of SHA-256(the caller's request_hash);
                                             -- NULL in a message row: the empty fingerprint's
    response_body    jsonb,
    checkpoint_phase text,
    checkpoint_data  jsonb,
    -- no CHECK constraints: only pg_idem's own statements write here, and the executor would
    -- re-read and compile every CHECK expression for each of them (6% of a claim's CPU)
    CONSTRAINT keys_pkey PRIMARY KEY (tenant, key)
) WITH (
    -- complete, fail, heartbeat and checkpoint change no indexed column, so they stay HOT when
    -- the page has room: 5% is kept for them. More would waste space: pages stop taking new
    -- rows at the fillfactor, but dead versions are only pruned once free space falls below
    -- max(the reserve, 10%), so a larger reserve leaves dead space behind that no insert reuses.
    fillfactor = 95,
    -- purges leave dead tuples behind in bursts; reclaim them promptly
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);

-- The purge walks this index. It is keyed on purge_after, never on expires_at, because
-- idem_complete moves expires_at and an index on it would make every complete a non-HOT update.
-- Invariant: purge_after <= expires_at, and only the purge itself moves purge_after forward;
-- in a message row (expires_at NULL) purge_after is the expiry itself, set once.
CREATE INDEX keys_purge_after_idx ON idem.keys (purge_after);

COMMENT ON TABLE idem.keys IS 'pg_idem idempotency keys, one row per (tenant, key)';

-- Watermarks of ordered streams (idem_claim_seq): one row per stream, whatever the message count.
CREATE TABLE idem.watermarks (
    watermark  bigint      NOT NULL,
    updated_at timestamptz NOT NULL,
    tenant     text NOT NULL,             -- the default collation, as in idem.keys
    stream     text COLLATE "C" NOT NULL,
    CONSTRAINT watermarks_pkey PRIMARY KEY (tenant, stream)
) WITH (fillfactor = 50);

COMMENT ON TABLE idem.watermarks IS 'pg_idem high-watermarks of ordered streams, one row per (tenant, stream)';

-- Tenants a role may act on, used when pg_idem.tenant_grants is on (see idem_grant_tenant).
-- regrole, so that pg_dump writes role names and a restore maps them to the new roles' OIDs.
CREATE TABLE idem.tenant_grants (
    role   regrole NOT NULL,
    tenant text NOT NULL                      -- the default collation, as in idem.keys
);
-- regrole has no btree operator class of its own; oid's applies (the two are binary-compatible)
CREATE UNIQUE INDEX tenant_grants_pkey ON idem.tenant_grants (tenant, role pg_catalog.oid_ops);
ALTER TABLE idem.tenant_grants ADD CONSTRAINT tenant_grants_pkey PRIMARY KEY USING INDEX tenant_grants_pkey;

COMMENT ON TABLE idem.tenant_grants IS 'pg_idem tenants granted to roles, enforced when pg_idem.tenant_grants is on';

REVOKE ALL ON ALL TABLES IN SCHEMA idem FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA idem FROM PUBLIC;

-- pg_dump keeps the rows and the sequence position, so a restore brings back every key and
-- never hands out a fence that was already used.
SELECT pg_catalog.pg_extension_config_dump('idem.keys', '');
SELECT pg_catalog.pg_extension_config_dump('idem.watermarks', '');
SELECT pg_catalog.pg_extension_config_dump('idem.fence_seq', '');
SELECT pg_catalog.pg_extension_config_dump('idem.tenant_grants', '');
