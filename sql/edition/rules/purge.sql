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
-- wrote a key draws (idem.purge_in_passing_drawn), and one draw of eight deletes up to 16
-- expired keys (2 per call on average, never more than 16; a batch draws for each key it
-- wrote, and purges 16 for each draw in one pass: `draws`), so expired keys go at least as
-- fast as calls add keys and the table stays bounded with nothing scheduled. Only finished
-- keys (completed, failed, consumed): an attempt
-- in progress may be the caller's own, which stays its own however long it has run (and
-- abandoned attempts are few; idem_purge() takes them). It never waits (SKIP LOCKED) and never
-- pays for a backlog;
-- the rows it deletes stay locked until the caller's transaction ends, so a claim of one of
-- those expired keys in another transaction waits for that end. The owner turns it off with
-- pg_idem.purge_in_passing in idem.settings (then schedule idem_purge(), with pg_cron say).
CREATE FUNCTION idem.purge_in_passing(now timestamptz, tenant text, draws integer DEFAULT 1) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    -- read in an expression of its own, whose plan is kept: a statement with parameters is
    -- planned again for its first five runs, and each plan reads the settings again
    -- (idem.owner_settings_now). The call that purges checked the session's settings already.
    tenant_grants boolean := (idem.owner_settings(warn => false)).tenant_grants;
BEGIN
    -- a call gets here at one draw of eight: the check costs nothing the other seven
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
        PERFORM idem.purge_batch(now, 16 OPERATOR(pg_catalog.*) draws,
            CASE WHEN tenant_grants THEN ARRAY[tenant] END, true);
    END IF;
END
$$;

-- One draw of the purge in passing, for a call that wrote a key: true one time in eight.
-- Inlined into the caller's expression (LANGUAGE sql, VOLATILE: random() in it). Drawn from
-- random(), which setseed() seeds: a session that seeds it draws the same on every run, so a
-- test's purges in passing are the same on every run (the tests' harness seeds each
-- connection, tests/harness/connect.rs). A session choosing its own draws decides only whether
-- its own calls purge in passing, which the owner's idem_purge() does anyway.
CREATE FUNCTION idem.purge_in_passing_drawn() RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT pg_catalog.random() OPERATOR(pg_catalog.<) 0.125
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
