-- ---------------------------------------------------------------------------------------------
-- Consumed messages (src/rules/consumes.rs, src/store/spi.rs's consume)
-- ---------------------------------------------------------------------------------------------

-- Records a message as processed unless it was: true when it is new. `function`: the SQL
-- function that consumes (idem_consume, idem_consume_many), named by its errors. The insert of a new
-- message, or the row lock, waits for a transaction claiming, finishing or consuming the key
-- (until it ends), and the decision is made on what it left. A new message is a narrow row
-- (sql/schema.sql): its key, state 'c' and its expiry in purge_after, every other column NULL.
-- `insert_first`: try the insert of a new message before anything else (false where the
-- caller saw the key's row already: idem_consume_many).
CREATE FUNCTION idem.consume(function text, tenant text, key text, ttl_us bigint, now timestamptz,
                             insert_first boolean DEFAULT true) RETURNS boolean
LANGUAGE plpgsql
AS $$
-- the ON CONFLICT below names the primary key's columns, not the constraint: a DBA's rebuilt
-- primary key (REINDEX CONCURRENTLY, a new index swapped in) keeps its columns, not always
-- its name; the columns are the table's, not this function's parameters of the same names
#variable_conflict use_column
DECLARE
    lock_id bigint;
    r idem.key_row;
    mine boolean := false;
    new_attempt integer;
    expiry timestamptz := idem.after(now, ttl_us);
    inserted boolean;
BEGIN
    IF insert_first AND NOT pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
        -- a new message (the usual case) in one statement: the row, then the key lock for
        -- claims to see (only pg_idem's owner writes idem.keys: an insert of the key waits for
        -- whoever is inserting it). A key that has a row, or an insert that does nothing (a
        -- row committed meanwhile, a trigger that drops it), writes nothing and takes no lock
        -- here: the loop below decides it. (One statement locks idem.keys in its write mode
        -- before it touches an index, which the LOCK TABLE below does for the loop's reads.)
        WITH written AS (
            INSERT INTO idem.keys AS k (tenant, key, state, purge_after)
            VALUES (consume.tenant, consume.key, 'c', expiry)
            ON CONFLICT (tenant, key) DO NOTHING
            RETURNING true)
        -- the lock of the key as called (claims compute it from their arguments), not as a
        -- trigger of the DBA's may have stored it
        SELECT pg_catalog.pg_try_advisory_xact_lock(idem.key_lock_id(consume.tenant, consume.key)) IS NOT NULL INTO inserted
          FROM written AS w;
    END IF;
    -- NULL unless the statement above wrote the message
    IF inserted IS NULL THEN
        lock_id := idem.key_lock_id(tenant, key);
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
                r := idem.read_key(tenant, key, true);
            END IF;
            -- the rule of src/rules/consumes.rs's plan_consume
            new_attempt := NULL;
            IF r.state OPERATOR(pg_catalog.=) 'p'::"char" AND mine THEN
                PERFORM idem.consume_held(function, tenant, key, r.lease_expires_at, true);
            END IF;
            IF r.state IS NOT NULL AND now OPERATOR(pg_catalog.<=) r.expires_at THEN
                IF r.state OPERATOR(pg_catalog.<>) 'p'::"char" THEN
                    RETURN false;
                END IF;
                IF r.lease_expires_at IS NOT NULL AND now OPERATOR(pg_catalog.<=) r.lease_expires_at THEN
                    PERFORM idem.consume_held(function, tenant, key, r.lease_expires_at, false);
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
                    PERFORM idem.dropped_write(function, tenant, key);
                END IF;
            ELSE
                UPDATE idem.keys AS k
                   SET state = 'c', lease_expires_at = NULL, response_code = NULL, response_body = NULL,
                       checkpoint_phase = NULL, checkpoint_data = NULL, expires_at = NULL,
                       purge_after = expiry, fence = NULL, attempt = new_attempt,
                       request_hash = NULL, claimed_at = NULL, ttl = NULL
                 WHERE k.tenant OPERATOR(pg_catalog.=) consume.tenant AND k.key OPERATOR(pg_catalog.=) consume.key;
            END IF;
            -- written; else inserted by another node meanwhile, or purged: look again
            EXIT WHEN FOUND;
        END LOOP;
    END IF;
    IF idem.purge_in_passing_drawn() THEN
        PERFORM idem.purge_in_passing(now, tenant);
    END IF;
    RETURN true;
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

-- 55P03: a consume (by SQL function `function`) of a key an attempt of idem_claim holds
-- (mine: this transaction's).
CREATE FUNCTION idem.consume_held(function text, tenant text, key text, lease_expires_at timestamptz, mine boolean)
RETURNS void
LANGUAGE sql
AS $$
    SELECT idem.raise_error('55P03',
        pg_catalog.format('%s: key "%s" of tenant "%s" is held by an attempt in progress', function, key, tenant),
        CASE WHEN mine THEN 'This transaction claimed it with idem_claim and has not completed it.'
             WHEN lease_expires_at IS NOT NULL
             THEN pg_catalog.format('An attempt claimed it with idem_claim; its lease runs until %s.', lease_expires_at)
             ELSE 'An attempt claimed it with idem_claim.' END,
        'Do not acknowledge the message: let it be redelivered later (once the lease has passed, idem_consume takes the key over), or finish the attempt with idem_complete.')
$$;
