-- ---------------------------------------------------------------------------------------------
-- Claims (src/rules/claims.rs, src/store/spi.rs's claim)
-- ---------------------------------------------------------------------------------------------

-- The claim of a key; its answer as idem_claim's result row. The hot paths (a replay, a new
-- key) run as few statements and calls as they can: a PL/pgSQL call or a statement costs
-- microseconds each, which is most of what the SQL edition spends.
CREATE FUNCTION idem.claim(function text, tenant text, key text, request_hash bytea, lease_us bigint, ttl_us bigint,
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
        IF NOT k_found THEN
            IF NOT locked AND NOT reject_stale_uuidv7
               AND NOT pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
                -- a new key (the usual case) in one statement: the key lock, then the row, as the
                -- rounds below take a key without one (each PL/pgSQL expression a transaction
                -- evaluates is set up again in that transaction: a few microseconds each)
                WITH lock AS (
                    SELECT pg_catalog.pg_try_advisory_xact_lock(idem.key_lock_id(claim.tenant, claim.key)) AS taken,
                           idem.after(claim.now, claim.lease_us) AS lease_at,
                           idem.after(claim.now, claim.ttl_us) AS purge_at),
                written AS (
                    INSERT INTO idem.keys AS k (tenant, key, fence, attempt, state, request_hash, claimed_at,
                                                lease_expires_at, expires_at, purge_after, ttl)
                    SELECT claim.tenant, claim.key, pg_catalog.nextval('idem.fence_seq'::pg_catalog.regclass), 1, 'p',
                           claim.request_hash, claim.now, l.lease_at, GREATEST(l.purge_at, l.lease_at), l.purge_at,
                           idem.us_interval(claim.ttl_us)
                      FROM lock AS l
                     WHERE l.taken
                    ON CONFLICT (tenant, key) DO NOTHING
                    RETURNING k.fence, k.checkpoint_phase, k.checkpoint_data)
                SELECT l.taken, l.lease_at, l.purge_at, w.fence, w.checkpoint_phase, w.checkpoint_data
                  INTO locked, lease_at, purge_at, new_fence, phase, data
                  FROM lock AS l LEFT JOIN written AS w ON true;
                IF new_fence IS NOT NULL THEN
                    IF idem.purge_in_passing_drawn() THEN
                        PERFORM idem.purge_in_passing(now, tenant);
                    END IF;
                    result := ROW('claimed', new_fence, 1, NULL, NULL, lease_at, GREATEST(purge_at, lease_at), phase, data);
                    RETURN result;
                END IF;
                IF NOT locked AND idem.key_held_elsewhere(tenant, key, false) THEN
                    result := ROW('in_progress', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
                    RETURN result;
                END IF;
                -- the lock taken, and the insert did nothing: a row committed since the read (or a
                -- trigger that drops the insert): decided below with the lock, as after the rounds'
                -- own insert
                CONTINUE;
            END IF;
        ELSIF k_odd THEN
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
            IF pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
                -- (tested inline: a PERFORM is a statement, which a claim pays in microseconds)
                PERFORM idem.prevent_if_read_only('INSERT');
            END IF;
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
            IF idem.purge_in_passing_drawn() THEN
                PERFORM idem.purge_in_passing(now, tenant);
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
    PERFORM idem.dropped_write(function, tenant, key);
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
