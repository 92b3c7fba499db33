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
    IF pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
        PERFORM idem.prevent_if_read_only(CASE operation WHEN 'release' THEN 'DELETE'
            WHEN 'assert' THEN 'SELECT FOR NO KEY UPDATE' ELSE 'UPDATE' END);
    END IF;
    IF operation IN ('complete', 'fail') THEN
        -- the usual case in one statement: the key held by this fence, a whole row in progress
        -- (one read_key accepts), then the key lock for claims to see (below). Anything else
        -- (and a write a trigger drops) changes nothing and takes no lock here, and the path
        -- below says what is wrong. (One statement locks idem.keys in its write mode before
        -- it touches an index, which the LOCK TABLE below does for the path's separate reads.)
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
        RETURNING k.expires_at, pg_catalog.pg_try_advisory_xact_lock(idem.key_lock_id(fenced.tenant, fenced.key))
             INTO expires_at, locked;
        IF FOUND THEN
            lease_expires_at := NULL;
            RETURN;
        END IF;
    END IF;
    -- idem.keys in the mode its writes need, before the first read: a read's weaker lock
    -- upgraded at the write deadlocks with REINDEX, VACUUM FULL or CLUSTER queued in between
    -- (the native engine opens idem.keys in this mode too)
    LOCK TABLE idem.keys IN ROW EXCLUSIVE MODE;
    -- the key lock, for claims to see (idem.key_held_elsewhere): taken if free, never waited for,
    -- since a role can take an id it saw in pg_locks; the row lock below is what waits for
    -- whoever is claiming or finishing the key
    locked := pg_catalog.pg_try_advisory_xact_lock(idem.key_lock_id(tenant, key));
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
