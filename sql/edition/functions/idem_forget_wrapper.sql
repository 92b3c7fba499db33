-- (the ON CONFLICT columns are the table's, not this function's parameters of the same names)
#variable_conflict use_column
DECLARE
    s idem.owner_settings := idem.owner_settings();
    forgotten boolean;
    placed boolean;
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, key, 'key', s.max_key_length);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    PERFORM idem.prevent_if_read_only('DELETE');
    -- the key lock, taken if free and never waited for (pg_locks shows its id to all). Held, it
    -- may be a claim inserting the key right now: an insert of the key waits for that as the
    -- lock would (only pg_idem's owner writes idem.keys), and the row it leaves if there was
    -- none is the one deleted below, reported as nothing forgotten
    IF NOT pg_catalog.pg_try_advisory_xact_lock(idem.key_lock_id(tenant, key)) THEN
        INSERT INTO idem.keys AS k (tenant, key, state, purge_after)
        VALUES (idem_forget.tenant, idem_forget.key, 'c', pg_catalog.clock_timestamp())
        ON CONFLICT (tenant, key) DO NOTHING
        RETURNING true INTO placed;
    END IF;
    DELETE FROM idem.keys AS k
     WHERE k.tenant OPERATOR(pg_catalog.=) idem_forget.tenant AND k.key OPERATOR(pg_catalog.=) idem_forget.key
    RETURNING true INTO forgotten;
    IF NOT FOUND AND EXISTS (SELECT FROM idem.keys AS k
                              WHERE k.tenant OPERATOR(pg_catalog.=) idem_forget.tenant
                                AND k.key OPERATOR(pg_catalog.=) idem_forget.key) THEN
        PERFORM idem.dropped_write('idem_forget', tenant, key);
    END IF;
    RETURN COALESCE(forgotten, false) AND placed IS NULL;
END
