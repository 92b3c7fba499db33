-- pg_idem's settings in the SQL edition (the native ones: src/pg/guc.rs).
--
-- Without pg_idem's library a pg_idem.* setting is a placeholder, which any session may SET for
-- itself. That is fine for the settings the native edition lets every session change (lease
-- timeout, ttl, reject_stale_uuidv7): they are read from the placeholders, with the native
-- units. The settings only a superuser may change natively (the limits, and tenant_grants,
-- which is an access boundary) would be no boundary as placeholders, so they live in this
-- table, which only pg_idem's owner can read or write. It holds only what the owner changed (a
-- missing row is the default), so that a dump restored into a fresh install brings the owner's
-- settings back instead of colliding with rows of defaults:
--     INSERT INTO idem.settings VALUES ('pg_idem.tenant_grants', 'on')
--         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
CREATE TABLE idem.settings (
    name  text COLLATE "C" PRIMARY KEY CHECK (name IN (
              'pg_idem.tenant_grants',        -- off
              'pg_idem.max_key_length',       -- 255
              'pg_idem.max_response_bytes',   -- 1048576 (bytes)
              'pg_idem.max_batch_keys',       -- 1000
              'pg_idem.purge_in_passing')),   -- on: the SQL edition's own (rules.sql)
    value text NOT NULL
);
COMMENT ON TABLE idem.settings IS
'pg_idem (SQL edition) settings only its owner may change; a missing row is the default';
SELECT pg_catalog.pg_extension_config_dump('idem.settings', '');

-- The owner's settings of one call, read once.
CREATE TYPE idem.owner_settings AS (
    tenant_grants boolean,
    max_key_length integer,
    max_response_bytes integer,
    max_batch_keys integer
);

-- Whether idem.keys is as pg_idem created it (src/store/definition.rs): while one of pg_idem's
-- own columns has another type, typmod, collation or NULL rule, or is generated, dropped or
-- renamed, every call is refused with 55000, as natively (an expires_at of type timestamp
-- would otherwise replay keys by each session's TimeZone). Columns of the DBA's, defaults,
-- triggers and rules are allowed. Declared IMMUTABLE, which it is not, on purpose: the planner
-- runs it once when it plans the statement of idem.owner_settings below (a constant, folded
-- away), and that plan is kept until idem.keys changes (the statement names
-- 'idem.keys'::regclass, which PostgreSQL's plan cache watches, as it watches a sequence named
-- by nextval): the check is paid once per session and per change of the table, not per call.
CREATE FUNCTION idem.keys_as_created() RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    c record;
    difference text;
BEGIN
    FOR c IN
        SELECT e.name, e.type, e.nulls, e.coll, e.also, a.attname IS NOT NULL AS found,
               a.atttypid, a.atttypmod, a.attcollation, a.attnotnull,
               a.attidentity OPERATOR(pg_catalog.<>) '' OR a.attgenerated OPERATOR(pg_catalog.<>) '' AS generated
          FROM (VALUES
                (1, 'purge_after', 'pg_catalog.timestamptz'::pg_catalog.regtype, 'never', 0, 0),
                (2, 'fence', 'pg_catalog.int8'::pg_catalog.regtype, 'message', 0, 0),
                (3, 'claimed_at', 'pg_catalog.timestamptz'::pg_catalog.regtype, 'message', 0, 0),
                (4, 'expires_at', 'pg_catalog.timestamptz'::pg_catalog.regtype, 'message', 0, 0),
                (5, 'ttl', 'pg_catalog.interval'::pg_catalog.regtype, 'message', 0, 0),
                (6, 'state', 'pg_catalog."char"'::pg_catalog.regtype, 'never', 0, 0),
                (7, 'tenant', 'pg_catalog.text'::pg_catalog.regtype, 'never', 100, 950),
                (8, 'key', 'pg_catalog.text'::pg_catalog.regtype, 'never', 950, 950),
                (9, 'attempt', 'pg_catalog.int4'::pg_catalog.regtype, 'message', 0, 0),
                (10, 'response_code', 'pg_catalog.int4'::pg_catalog.regtype, 'allowed', 0, 0),
                (11, 'lease_expires_at', 'pg_catalog.timestamptz'::pg_catalog.regtype, 'allowed', 0, 0),
                (12, 'request_hash', 'pg_catalog.bytea'::pg_catalog.regtype, 'message', 0, 0),
                (13, 'response_body', 'pg_catalog.jsonb'::pg_catalog.regtype, 'allowed', 0, 0),
                (14, 'checkpoint_phase', 'pg_catalog.text'::pg_catalog.regtype, 'allowed', 100, 100),
                (15, 'checkpoint_data', 'pg_catalog.jsonb'::pg_catalog.regtype, 'allowed', 0, 0)
               ) AS e(ord, name, type, nulls, coll, also)
          LEFT JOIN pg_catalog.pg_attribute AS a
            ON a.attrelid OPERATOR(pg_catalog.=) 'idem.keys'::pg_catalog.regclass
           AND a.attname OPERATOR(pg_catalog.=) e.name AND a.attnum OPERATOR(pg_catalog.>) 0
           AND NOT a.attisdropped
         ORDER BY e.ord
    LOOP
        difference := CASE
            WHEN NOT c.found THEN
                pg_catalog.format('Column %s is missing (dropped or renamed).', c.name)
            WHEN c.atttypid OPERATOR(pg_catalog.<>) c.type::pg_catalog.oid OR c.atttypmod OPERATOR(pg_catalog.<>) -1 THEN
                pg_catalog.format('Column %s has type %s; pg_idem stores %s there.', c.name,
                    pg_catalog.format_type(c.atttypid, c.atttypmod), pg_catalog.format_type(c.type, NULL))
            WHEN c.attcollation::pg_catalog.int4 OPERATOR(pg_catalog.<>) c.coll
                 AND c.attcollation::pg_catalog.int4 OPERATOR(pg_catalog.<>) c.also THEN
                pg_catalog.format('Column %s has collation %s; pg_idem created it with %s.', c.name,
                    COALESCE((SELECT '"' OPERATOR(pg_catalog.||) l.collname OPERATOR(pg_catalog.||) '"'
                                FROM pg_catalog.pg_collation AS l
                               WHERE l.oid OPERATOR(pg_catalog.=) c.attcollation), 'none'),
                    (SELECT '"' OPERATOR(pg_catalog.||) l.collname OPERATOR(pg_catalog.||) '"'
                       FROM pg_catalog.pg_collation AS l
                      WHERE l.oid::pg_catalog.int4 OPERATOR(pg_catalog.=) c.coll))
            WHEN c.nulls OPERATOR(pg_catalog.<>) 'never' AND c.attnotnull THEN
                -- the SQL edition writes message rows without these (0.5.0 created them so)
                pg_catalog.format('Column %s is NOT NULL; pg_idem stores NULL there.', c.name)
            WHEN c.nulls OPERATOR(pg_catalog.=) 'never' AND NOT c.attnotnull THEN
                pg_catalog.format('Column %s allows NULL; pg_idem relies on it being NOT NULL.', c.name)
            WHEN c.generated THEN
                pg_catalog.format('Column %s is an identity or generated column; pg_idem writes its values itself.', c.name)
        END;
        IF difference IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = 'object_not_in_prerequisite_state',
                MESSAGE = 'idem.keys is not the table pg_idem created',
                DETAIL = difference,
                HINT = 'Undo the change with ALTER TABLE idem.keys (pg_idem''s own columns must keep the type, collation and NOT NULL that CREATE EXTENSION gave them). Columns of your own, defaults, triggers and rules are allowed: README, Operations.';
        END IF;
    END LOOP;
    RETURN true;
END
$$;

-- PL/pgSQL, not SQL: a SQL function with an aggregate is never inlined, and called from
-- PL/pgSQL it would be planned anew at every call (70 us); this one keeps its plan.
CREATE FUNCTION idem.owner_settings() RETURNS idem.owner_settings
LANGUAGE plpgsql STABLE
AS $$
-- A loop over the rows the owner added (usually none): an aggregate over them costs 5 to 10
-- times more (its executor node is set up at every call).
DECLARE
    result idem.owner_settings := ROW(false, 255, 1048576, 1000);
    setting record;
BEGIN
    -- idem.keys_as_created() runs when this statement is planned, and the plan is kept until
    -- idem.keys changes (the regclass constant): see above
    FOR setting IN SELECT s.name, s.value, 'idem.keys'::pg_catalog.regclass AS keys
                     FROM idem.settings AS s WHERE idem.keys_as_created() LOOP
        CASE setting.name
        WHEN 'pg_idem.tenant_grants' THEN
            result.tenant_grants := setting.value::pg_catalog.bool;
        WHEN 'pg_idem.max_key_length' THEN
            result.max_key_length := setting.value::pg_catalog.int4;
        WHEN 'pg_idem.max_response_bytes' THEN
            result.max_response_bytes := setting.value::pg_catalog.int4;
        WHEN 'pg_idem.max_batch_keys' THEN
            result.max_batch_keys := setting.value::pg_catalog.int4;
        ELSE
            NULL;   -- pg_idem.purge_in_passing: rules.sql
        END CASE;
    END LOOP;
    RETURN result;
END
$$;

-- A session setting (placeholder) as microseconds: NULL or '' when unset gives the default; a
-- bare number counts in the setting's native unit (unit_us microseconds each), anything else
-- is read as an interval ('30s', '5min', '1 day').
CREATE FUNCTION idem.session_duration_us(setting text, unit_us bigint, default_us bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    raw text := pg_catalog.current_setting(setting, true);
    us bigint;
BEGIN
    IF raw IS NULL OR raw OPERATOR(pg_catalog.=) '' THEN
        RETURN default_us;
    END IF;
    BEGIN
        IF raw OPERATOR(pg_catalog.~) '^[[:space:]]*[0-9]+[[:space:]]*$' THEN
            us := raw::pg_catalog.int8 OPERATOR(pg_catalog.*) unit_us;
        ELSE
            us := idem.interval_us(raw::pg_catalog.interval);
        END IF;
    EXCEPTION WHEN data_exception OR syntax_error THEN
        us := NULL;
    END;
    IF us IS NULL OR us OPERATOR(pg_catalog.<=) 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('invalid value for parameter "%s": "%s"', setting, raw),
            DETAIL = 'pg_idem''s SQL edition reads this setting as a positive duration.',
            HINT = 'Set a positive number in the setting''s unit or an interval such as ''30s''.';
    END IF;
    RETURN us;
END
$$;

-- An interval as microseconds, a day counted as 24 hours and a month as 30 days, as the native
-- edition counts them (src/sql_api/args.rs).
CREATE FUNCTION idem.interval_us(value interval) RETURNS numeric
LANGUAGE sql IMMUTABLE
AS $$
    -- (OPERATOR() binds all operators alike, left to right: every step is parenthesised)
    SELECT (((((EXTRACT(year FROM value) OPERATOR(pg_catalog.*) 12)
                OPERATOR(pg_catalog.+) EXTRACT(month FROM value)) OPERATOR(pg_catalog.*) 30)
              OPERATOR(pg_catalog.+) EXTRACT(day FROM value)) OPERATOR(pg_catalog.*) 86400000000)
           OPERATOR(pg_catalog.+) (EXTRACT(hour FROM value) OPERATOR(pg_catalog.*) 3600000000)
           OPERATOR(pg_catalog.+) (EXTRACT(minute FROM value) OPERATOR(pg_catalog.*) 60000000)
           OPERATOR(pg_catalog.+) EXTRACT(microseconds FROM value)
$$;
