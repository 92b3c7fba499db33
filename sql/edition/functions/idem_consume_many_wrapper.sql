-- (the ON CONFLICT columns are the table's, not this function's parameter of the same name)
#variable_conflict use_column
DECLARE
    s idem.owner_settings := idem.owner_settings();
    ttl_us bigint;
    n integer;
    now timestamptz;
    absent text[];
    inserted text[];
    hits integer;
    bad bigint;
    message text;
    first_inserted boolean;
    inserted_before boolean;
BEGIN
    -- any array (another lower bound, several dimensions): its elements in order, from 1
    keys := CASE WHEN keys IS NOT NULL THEN ARRAY(SELECT pg_catalog.unnest(keys)) END;
    PERFORM idem.check_name(tenant, 'tenant', s.max_key_length);
    ttl_us := idem.ttl_us(ttl, s.ttl_us);
    IF s.tenant_grants THEN
        PERFORM idem.check_access(tenant, true);
    END IF;
    n := idem.check_batch(keys, 'keys', 'Pass an array of message keys, such as ARRAY[''m1'', ''m2''].', s.max_batch_keys);
    -- the first key idem.check_tenant_and_key refuses, found by one statement: it raises the
    -- error for it (the tenant passed its checks above)
    SELECT m.i INTO bad FROM pg_catalog.unnest(keys) WITH ORDINALITY AS m(key, i)
     WHERE idem.tenant_and_key_to_check(idem_consume_many.tenant, m.key, s.max_key_length)
     ORDER BY m.i LIMIT 1;
    IF bad IS NOT NULL THEN
        PERFORM idem.check_tenant_and_key(tenant, keys[bad], pg_catalog.format('keys[%s]', bad), s.max_key_length);
        PERFORM idem.impossible(pg_catalog.format('keys[%s] passed the checks it failed', bad));
    END IF;
    now := pg_catalog.clock_timestamp();
    IF n OPERATOR(pg_catalog.>) 0 AND NOT pg_catalog.current_setting('transaction_read_only')::pg_catalog.bool THEN
        -- The usual batch, mostly new messages, in three statements instead of n calls: what
        -- idem.consume does for a key without a row (the key lock, then an insert that does
        -- nothing if a row came meanwhile), for all of them at once. The locks are taken in
        -- input order, as one by one; a key that has a row, or whose insert did nothing, goes
        -- through idem.consume below.
        LOCK TABLE idem.keys IN ROW EXCLUSIVE MODE;
        -- one look-up of the primary key per key, whatever the plan cache keeps: a NOT EXISTS
        -- here, planned while idem.keys is small, is kept as a scan of the tenant's every key
        SELECT pg_catalog.array_agg(m.key ORDER BY m.i) INTO absent
          FROM pg_catalog.unnest(keys) WITH ORDINALITY AS m(key, i)
          LEFT JOIN LATERAL (SELECT true AS found FROM idem.keys AS k
                              WHERE k.tenant OPERATOR(pg_catalog.=) idem_consume_many.tenant
                                AND k.key OPERATOR(pg_catalog.=) m.key
                              LIMIT 1) AS row ON true
         WHERE row.found IS NULL;
        -- the key locks for claims to see, never waited for (pg_locks shows their ids to all): the
        -- insert waits for whoever is inserting one of the keys
        PERFORM pg_catalog.pg_try_advisory_xact_lock(idem.key_lock_id(tenant, a.key))
           FROM pg_catalog.unnest(absent) WITH ORDINALITY AS a(key, i);
        WITH written AS (
            INSERT INTO idem.keys AS k (tenant, key, state, purge_after)
            SELECT idem_consume_many.tenant, a.key, 'c', idem.after(now, ttl_us)
              FROM pg_catalog.unnest(absent) AS a(key)
            ON CONFLICT (tenant, key) DO NOTHING
            RETURNING k.key)
        SELECT pg_catalog.array_agg(w.key) INTO inserted FROM written AS w;
        -- the purges in passing one by one would do, in one pass: a draw for each key written
        SELECT pg_catalog.count(*) INTO hits
          FROM pg_catalog.generate_series(1, COALESCE(pg_catalog.cardinality(inserted), 0))
         WHERE idem.purge_in_passing_drawn();
        IF hits OPERATOR(pg_catalog.>) 0 THEN
            PERFORM idem.purge_in_passing(now, tenant, hits);
        END IF;
    END IF;
    IF COALESCE(pg_catalog.cardinality(inserted), 0) OPERATOR(pg_catalog.=) n THEN
        -- every key new, each once (the usual batch)
        RETURN QUERY SELECT m.key FROM pg_catalog.unnest(keys) WITH ORDINALITY AS m(key, i) ORDER BY m.i;
        RETURN;
    END IF;
    -- in input order, so that a key repeated in the batch meets its own consume: new once
    FOR message, first_inserted, inserted_before IN
        SELECT m.key, m.i OPERATOR(pg_catalog.=) w.first, w.first IS NOT NULL
          FROM pg_catalog.unnest(keys) WITH ORDINALITY AS m(key, i)
          LEFT JOIN (SELECT x.key, pg_catalog.min(y.i) AS first
                       FROM pg_catalog.unnest(inserted) AS x(key)
                       JOIN pg_catalog.unnest(keys) WITH ORDINALITY AS y(key, i)
                         ON y.key OPERATOR(pg_catalog.=) x.key
                      GROUP BY x.key) AS w ON w.key OPERATOR(pg_catalog.=) m.key
         ORDER BY m.i
    LOOP
        IF first_inserted THEN
            RETURN NEXT message;
        ELSIF inserted_before THEN
            -- a repeat of a message this call wrote: processed already
            CONTINUE;
        ELSIF idem.consume('idem_consume_many', tenant, message, ttl_us, now, false) THEN
            RETURN NEXT message;
        END IF;
    END LOOP;
END
