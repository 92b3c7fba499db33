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
    FOR setting IN SELECT s.name, s.value FROM idem.settings AS s LOOP
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
