-- pg_idem's settings in the SQL edition (the native ones: src/pg/guc.rs, which
-- tests/sql_edition.rs compares with idem.setting_definitions() below).
--
-- Without pg_idem's library a pg_idem.* setting is a placeholder: any session may SET it for
-- itself, and on PostgreSQL 15 and later only a superuser may ALTER DATABASE or ALTER ROLE SET
-- it, which a managed service's owner is not. So the SQL edition reads its settings from two
-- tables only pg_idem's owner can read or write, in the native precedence:
--     idem.role_settings   for one role (as ALTER ROLE ... SET: the role the session logged in as)
--     idem.settings        for the database (as ALTER DATABASE ... SET)
--     the default
-- and, for the settings every session may change natively (pg_idem.ttl, lease_timeout,
-- reject_stale_uuidv7), the session's own SET or SET LOCAL before all of them. The settings
-- only a superuser may change natively (tenant_grants, which is an access boundary, and the
-- limits) are read from the tables only: a session's SET of one is ignored, and said so with a
-- WARNING (idem.owner_settings()). Each value is checked when it is written, with the native
-- edition's units, bounds, errors and hints, and stored as the native edition's base unit
-- (pg_settings.setting: seconds for ttl, milliseconds for lease_timeout, bytes); an unknown
-- name is refused. The tables hold only what the owner changed (a missing row is the default),
-- so that a dump restored into a fresh install brings the owner's settings back instead of
-- colliding with rows of defaults:
--     INSERT INTO idem.settings VALUES ('pg_idem.ttl', '1d')
--         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value;
--     INSERT INTO idem.role_settings VALUES ('app_user', 'pg_idem.lease_timeout', '30s')
--         ON CONFLICT (role, name) DO UPDATE SET value = EXCLUDED.value;

-- Every setting: its type, unit (the native GUC's, as pg_settings shows it), bounds, default
-- and who sets it: 'session' (any session natively), 'owner' (a superuser natively),
-- 'database' (the SQL edition's own, for the whole database), 'native' (the purge worker's,
-- which the SQL edition has not).
CREATE FUNCTION idem.setting_definitions()
RETURNS TABLE (name text, vartype text, unit text, min_val bigint, max_val bigint, boot_val text, scope text)
LANGUAGE sql IMMUTABLE
AS $$
    VALUES ('pg_idem.lease_timeout', 'integer', 'ms', 1, 2147483647, '60000', 'session'),
           ('pg_idem.ttl', 'integer', 's', 1, 2147483647, '86400', 'session'),
           ('pg_idem.reject_stale_uuidv7', 'bool', NULL, NULL, NULL, 'off', 'session'),
           ('pg_idem.tenant_grants', 'bool', NULL, NULL, NULL, 'off', 'owner'),
           ('pg_idem.max_key_length', 'integer', NULL, 1, 1024, '255', 'owner'),
           ('pg_idem.max_response_bytes', 'integer', 'B', 1, 2147483647, '1048576', 'owner'),
           ('pg_idem.max_batch_keys', 'integer', NULL, 1, 100000, '1000', 'owner'),
           ('pg_idem.purge_in_passing', 'bool', NULL, NULL, NULL, 'on', 'database'),
           ('pg_idem.database', 'string', NULL, NULL, NULL, 'postgres', 'native'),
           ('pg_idem.purge_interval', 'integer', 'ms', 0, 2147483647, '60000', 'native'),
           ('pg_idem.purge_batch_delay', 'integer', 'ms', 0, 60000, '0', 'native'),
           ('pg_idem.purge_batch_size', 'integer', NULL, 1, 1000000, '1000', 'native'),
           ('pg_idem.purge_max_rate', 'integer', NULL, 0, 2147483647, '60000', 'native')
$$;

-- A value of setting `name` as the native edition stores it (pg_settings.setting), read as
-- PostgreSQL reads a SET (guc.c: parse_bool; parse_int with convert_to_base_unit), or the
-- native error: 22023 with PostgreSQL's own message and hint. `for_role`: for
-- idem.role_settings. Names are case-insensitive, as PostgreSQL's.
CREATE FUNCTION idem.setting_value(name text, value text, for_role boolean) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    d record;
    lowered text := pg_catalog.lower(name);
    parsed record;
    rounded pg_catalog.float8;
BEGIN
    SELECT * INTO d FROM idem.setting_definitions() AS s WHERE s.name OPERATOR(pg_catalog.=) lowered;
    IF NOT FOUND THEN
        IF pg_catalog.starts_with(lowered, 'pg_idem.') THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_name',
                MESSAGE = pg_catalog.format('invalid configuration parameter name "%s"', name),
                DETAIL = '"pg_idem" is a reserved prefix.';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'undefined_object',
            MESSAGE = pg_catalog.format('unrecognized configuration parameter "%s"', name);
    END IF;
    IF d.scope OPERATOR(pg_catalog.=) 'native' THEN
        RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
            MESSAGE = pg_catalog.format('%s has no effect in pg_idem''s SQL edition', d.name),
            DETAIL = 'It configures the native edition''s purge worker, which the SQL edition has not.',
            HINT = 'Schedule SELECT idem_purge() (with pg_cron, say); the calls also purge in passing unless pg_idem.purge_in_passing is off.';
    END IF;
    IF for_role AND d.scope OPERATOR(pg_catalog.=) 'database' THEN
        RAISE EXCEPTION USING ERRCODE = 'feature_not_supported',
            MESSAGE = pg_catalog.format('%s cannot be set for one role', d.name),
            DETAIL = 'The purge in passing deletes any tenant''s expired keys: it is one switch for the database.',
            HINT = 'Set it in idem.settings.';
    END IF;
    IF value IS NULL THEN
        RETURN NULL;    -- the table's NOT NULL says so
    END IF;
    IF d.vartype OPERATOR(pg_catalog.=) 'bool' THEN
        -- parse_bool: a prefix of true, false, yes or no, on, off (of), 1 or 0, any case
        CASE WHEN pg_catalog.length(value) OPERATOR(pg_catalog.>) 0
                  AND (pg_catalog.starts_with('true', pg_catalog.lower(value))
                       OR pg_catalog.starts_with('yes', pg_catalog.lower(value))
                       OR pg_catalog.lower(value) OPERATOR(pg_catalog.=) 'on'
                       OR value OPERATOR(pg_catalog.=) '1') THEN
            RETURN 'on';
        WHEN pg_catalog.length(value) OPERATOR(pg_catalog.>) 0
                  AND (pg_catalog.starts_with('false', pg_catalog.lower(value))
                       OR pg_catalog.starts_with('no', pg_catalog.lower(value))
                       OR pg_catalog.lower(value) OPERATOR(pg_catalog.=) ANY (ARRAY['of', 'off'])
                       OR value OPERATOR(pg_catalog.=) '0') THEN
            RETURN 'off';
        ELSE
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = pg_catalog.format('parameter "%s" requires a Boolean value', d.name);
        END CASE;
    END IF;
    parsed := idem.parse_setting_number(value, d.unit);
    IF parsed.number IS NULL OR pg_catalog.abs(pg_catalog.round(parsed.number)) OPERATOR(pg_catalog.>) 2147483647 THEN
        IF parsed.hint IS NULL AND parsed.number IS NOT NULL THEN
            parsed.hint := 'Value exceeds integer range.';
        END IF;
        PERFORM idem.raise_error('22023', pg_catalog.format('invalid value for parameter "%s": "%s"', d.name, value),
            NULL, parsed.hint);
    END IF;
    rounded := pg_catalog.round(parsed.number);
    IF rounded OPERATOR(pg_catalog.<) d.min_val OR rounded OPERATOR(pg_catalog.>) d.max_val THEN
        -- PostgreSQL 17 and later name the unit of the bounds too
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = pg_catalog.format('%s%s is outside the valid range for parameter "%s" (%s%s .. %s%s)',
                rounded::pg_catalog.int8, COALESCE(' ' OPERATOR(pg_catalog.||) d.unit, ''), d.name,
                d.min_val, CASE WHEN pg_catalog.current_setting('server_version_num')::pg_catalog.int4 OPERATOR(pg_catalog.>=) 170000
                                THEN COALESCE(' ' OPERATOR(pg_catalog.||) d.unit, '') ELSE '' END,
                d.max_val, CASE WHEN pg_catalog.current_setting('server_version_num')::pg_catalog.int4 OPERATOR(pg_catalog.>=) 170000
                                THEN COALESCE(' ' OPERATOR(pg_catalog.||) d.unit, '') ELSE '' END);
    END IF;
    RETURN rounded::pg_catalog.int8::pg_catalog.text;
END
$$;

-- A number with an optional unit as guc.c's parse_int reads it before rounding: in the base
-- unit of the setting (`base_unit`: 'ms', 's', 'B' or NULL for none), or number NULL for no
-- number at all; hint: PostgreSQL's, for a unit it does not know. Only [[:space:]] classes in
-- the patterns: a backslash would change meaning with standard_conforming_strings off.
CREATE FUNCTION idem.parse_setting_number(raw text, base_unit text, OUT number pg_catalog.float8, OUT hint text)
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    -- strtol(base 0) then, when it stops at '.', 'e' or 'E', strtod; whitespace before the
    -- unit and after it
    m text[] := pg_catalog.regexp_match(raw,
        '^[[:space:]]*([-+]?)(0[xX][0-9a-fA-F]+|[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?|[.][0-9]+([eE][-+]?[0-9]+)?)(.*)$');
    units text[];
    factors pg_catalog.float8[];
    i integer;
    unit text;
BEGIN
    IF m IS NULL THEN
        RETURN;     -- no number: no hint, as natively
    END IF;
    IF m[2] OPERATOR(pg_catalog.~) '^0[xX]' AND pg_catalog.length(m[2]) OPERATOR(pg_catalog.>) 17 THEN
        number := 1e19;     -- beyond a long: past an integer's range, as strtol's ERANGE
    ELSIF m[2] OPERATOR(pg_catalog.~) '^0[xX]' THEN
        number := ('x' OPERATOR(pg_catalog.||) pg_catalog.lpad(pg_catalog.substr(m[2], 3), 16, '0'))::bit(64)::pg_catalog.int8;
    ELSIF m[2] OPERATOR(pg_catalog.~) '^0[0-9]+$' THEN
        -- an integer with a leading 0 is octal; strtol stops at an 8 or a 9
        IF m[2] OPERATOR(pg_catalog.~) '[89]' THEN
            hint := CASE WHEN base_unit IS NOT NULL THEN idem.units_hint(base_unit) END;
            number := NULL;
            RETURN;
        END IF;
        number := 0;
        FOR i IN 2..pg_catalog.length(m[2]) LOOP
            number := number OPERATOR(pg_catalog.*) 8 OPERATOR(pg_catalog.+) pg_catalog.substr(m[2], i, 1)::pg_catalog.int4;
        END LOOP;
    ELSE
        BEGIN
            number := m[2]::pg_catalog.float8;
        EXCEPTION WHEN numeric_value_out_of_range THEN
            number := NULL;     -- strtod's ERANGE: no hint
            RETURN;
        END;
    END IF;
    IF m[1] OPERATOR(pg_catalog.=) '-' THEN
        number := OPERATOR(pg_catalog.-) number;
    END IF;
    IF m[6] OPERATOR(pg_catalog.~) '^[[:space:]]*$' THEN
        RETURN;
    END IF;
    -- a unit: at most three characters, then only whitespace
    unit := (pg_catalog.regexp_match(m[6], '^[[:space:]]*([^[:space:]]{1,3})[[:space:]]*$'))[1];
    IF base_unit IS NULL THEN
        number := NULL;     -- this setting takes no unit: no hint
        RETURN;
    ELSIF base_unit OPERATOR(pg_catalog.=) 'B' THEN
        units := ARRAY['TB', 'GB', 'MB', 'kB', 'B'];
        factors := ARRAY[1099511627776, 1073741824, 1048576, 1024, 1];
    ELSE
        units := ARRAY['d', 'h', 'min', 's', 'ms', 'us'];
        factors := ARRAY[86400000, 3600000, 60000, 1000, 1, 0.001];
        IF base_unit OPERATOR(pg_catalog.=) 's' THEN
            factors := ARRAY[86400, 3600, 60, 1, 0.001, 0.000001];
        END IF;
    END IF;
    i := pg_catalog.array_position(units, unit);
    IF i IS NULL THEN
        number := NULL;
        hint := idem.units_hint(base_unit);
        RETURN;
    END IF;
    number := number OPERATOR(pg_catalog.*) factors[i];
    -- a fraction is rounded to the next smaller unit, as natively ("1.5s" of a setting in ms)
    IF i OPERATOR(pg_catalog.<) pg_catalog.array_length(units, 1) THEN
        number := pg_catalog.round(number OPERATOR(pg_catalog./) factors[i OPERATOR(pg_catalog.+) 1])
                  OPERATOR(pg_catalog.*) factors[i OPERATOR(pg_catalog.+) 1];
    END IF;
END
$$;

CREATE FUNCTION idem.units_hint(base_unit text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN base_unit OPERATOR(pg_catalog.=) 'B'
                THEN 'Valid units for this parameter are "B", "kB", "MB", "GB", and "TB".'
                ELSE 'Valid units for this parameter are "us", "ms", "s", "min", "h", and "d".' END
$$;

-- Written through idem.settings_row(): the name in lower case, the value checked and stored
-- in the native base unit; the CHECKs hold the tables to it when triggers are off (a restore
-- with --disable-triggers writes what a dump of checked rows holds).
CREATE TABLE idem.settings (
    name  text COLLATE "C" PRIMARY KEY,
    value text NOT NULL,
    CONSTRAINT settings_value_check CHECK (idem.setting_value(name, value, false) OPERATOR(pg_catalog.=) value)
);
COMMENT ON TABLE idem.settings IS
'pg_idem (SQL edition) settings for this database, which only its owner may change; a missing row is the default';
SELECT pg_catalog.pg_extension_config_dump('idem.settings', '');

CREATE TABLE idem.role_settings (
    role  pg_catalog.regrole NOT NULL,
    name  text COLLATE "C" NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (role, name),
    CONSTRAINT role_settings_value_check CHECK (idem.setting_value(name, value, true) OPERATOR(pg_catalog.=) value)
);
COMMENT ON TABLE idem.role_settings IS
'pg_idem (SQL edition) settings for sessions logged in as one role, which only its owner may change; they come before idem.settings';
SELECT pg_catalog.pg_extension_config_dump('idem.role_settings', '');

CREATE FUNCTION idem.settings_row() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    NEW.name := pg_catalog.lower(NEW.name);
    NEW.value := idem.setting_value(NEW.name, NEW.value, TG_TABLE_NAME OPERATOR(pg_catalog.=) 'role_settings');
    RETURN NEW;
END
$$;
CREATE TRIGGER settings_row BEFORE INSERT OR UPDATE ON idem.settings
    FOR EACH ROW EXECUTE FUNCTION idem.settings_row();
CREATE TRIGGER settings_row BEFORE INSERT OR UPDATE ON idem.role_settings
    FOR EACH ROW EXECUTE FUNCTION idem.settings_row();

-- The owner's settings of one call, read once: the limits and tenant_grants, and the defaults
-- of the session settings (a session's own SET of those comes first: idem.lease_us, ttl_us,
-- reject_stale_uuidv7).
CREATE TYPE idem.owner_settings AS (
    tenant_grants boolean,
    max_key_length integer,
    max_response_bytes integer,
    max_batch_keys integer,
    lease_us bigint,
    ttl_us bigint,
    reject_stale_uuidv7 boolean
);

-- Whether idem.keys is as pg_idem created it (src/store/definition.rs): while one of pg_idem's
-- own columns has another type, typmod, collation or NULL rule, or is generated, dropped or
-- renamed, every call is refused with 55000, as natively (an expires_at of type timestamp
-- would otherwise replay keys by each session's TimeZone). Columns of the DBA's, defaults,
-- triggers and rules are allowed. It runs through idem.owner_settings_of_session() when the
-- planner plans idem.owner_settings()'s statement (a constant, folded away), and that plan is
-- kept until idem.keys changes (the statement names 'idem.keys'::regclass, which PostgreSQL's
-- plan cache watches, as it watches a sequence named by nextval): the check is paid once per
-- session and per change of the table, not per call. (VOLATILE itself: a call of an IMMUTABLE
-- function without arguments is folded into the caller's own cached plan, which no change of
-- idem.keys would make again.)
CREATE FUNCTION idem.keys_as_created() RETURNS boolean
LANGUAGE plpgsql
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
                HINT = 'Undo the change with ALTER TABLE idem.keys (pg_idem''s own columns must keep the type, collation and NOT NULL that CREATE EXTENSION gave them). Columns of your own, defaults, triggers and rules are allowed: docs/maintenance.md, Changing idem.keys.';
        END IF;
    END LOOP;
    RETURN true;
END
$$;

-- The owner's settings for the role this session logged in as, read from the tables, after
-- idem.keys_as_created(). Declared IMMUTABLE, which it is not, on purpose, like
-- idem.keys_as_created(): the planner runs it once where idem.owner_settings() is inlined into
-- a call's expression, and keeps the result as a constant of that expression's cached plan
-- (idem.owner_settings_now below says when the plan is made again). So a call reads no table;
-- a write of the owner reaches every session from its next call. (The role's rows come first,
-- as ALTER ROLE ... SET's before ALTER DATABASE's; a role is the one the session logged in as,
-- as for ALTER ROLE ... SET, which SET ROLE does not change.)
CREATE FUNCTION idem.owner_settings_of_session() RETURNS idem.owner_settings
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    result idem.owner_settings := ROW(false, 255, 1048576, 1000, 60000000, 86400000000, false);
    setting record;
BEGIN
    PERFORM idem.keys_as_created();
    FOR setting IN SELECT s.name, s.value FROM (
                       SELECT d.name, d.value, 0 AS rank FROM idem.settings AS d
                       UNION ALL
                       SELECT r.name, r.value, 1 FROM idem.role_settings AS r
                        WHERE r.role OPERATOR(pg_catalog.=) pg_catalog.to_regrole(pg_catalog.quote_ident(SESSION_USER))
                   ) AS s ORDER BY s.rank LOOP
        CASE setting.name
        WHEN 'pg_idem.tenant_grants' THEN
            result.tenant_grants := setting.value OPERATOR(pg_catalog.=) 'on';
        WHEN 'pg_idem.max_key_length' THEN
            result.max_key_length := setting.value::pg_catalog.int4;
        WHEN 'pg_idem.max_response_bytes' THEN
            result.max_response_bytes := setting.value::pg_catalog.int4;
        WHEN 'pg_idem.max_batch_keys' THEN
            result.max_batch_keys := setting.value::pg_catalog.int4;
        WHEN 'pg_idem.lease_timeout' THEN
            result.lease_us := setting.value::pg_catalog.int8 OPERATOR(pg_catalog.*) 1000;
        WHEN 'pg_idem.ttl' THEN
            result.ttl_us := setting.value::pg_catalog.int8 OPERATOR(pg_catalog.*) 1000000;
        WHEN 'pg_idem.reject_stale_uuidv7' THEN
            result.reject_stale_uuidv7 := setting.value OPERATOR(pg_catalog.=) 'on';
        ELSE
            NULL;   -- pg_idem.purge_in_passing: rules/purge.sql
        END CASE;
    END LOOP;
    RETURN result;
END
$$;

-- The owner's settings of this session, as a constant of the plan of every expression that
-- calls it (idem.owner_settings_of_session). Inlined there (a LANGUAGE sql function of one
-- SELECT), so that PostgreSQL's plan cache makes that plan again, in every session, when
--   - idem.keys changes (DDL, and any change of its pg_class row): the regclass constant below
--     stays in the plan, which the plan cache watches as it watches a table a statement reads
--     (the lookup of its file number costs a call one catalog cache hit);
--   - idem.settings or idem.role_settings is written: their statement trigger writes this
--     function again (idem.settings_changed), and a plan depends on the functions it inlined.
-- The plan made again runs idem.keys_as_created() and reads the tables again. A call reads no
-- table, and runs no statement for its settings.
CREATE FUNCTION idem.owner_settings_now() RETURNS idem.owner_settings
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN pg_catalog.pg_relation_filenode('idem.keys'::pg_catalog.regclass) IS NULL THEN NULL
                ELSE idem.owner_settings_of_session() END
$$;

-- A write of the settings tables makes the plans that inlined idem.owner_settings_now() be
-- made again (see above): the function written again, with the same body, is a change of its
-- pg_proc row, which PostgreSQL sends to every session. Only the owner (or a superuser) can
-- write the tables, and so run this (it owns the function, or is a superuser).
CREATE FUNCTION idem.settings_changed() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE pg_catalog.format('CREATE OR REPLACE FUNCTION idem.owner_settings_now() RETURNS idem.owner_settings LANGUAGE sql STABLE AS %L',
        (SELECT p.prosrc FROM pg_catalog.pg_proc AS p
          WHERE p.oid OPERATOR(pg_catalog.=) 'idem.owner_settings_now()'::pg_catalog.regprocedure));
    RETURN NULL;
END
$$;
CREATE TRIGGER settings_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idem.settings
    FOR EACH STATEMENT EXECUTE FUNCTION idem.settings_changed();
CREATE TRIGGER settings_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idem.role_settings
    FOR EACH STATEMENT EXECUTE FUNCTION idem.settings_changed();

-- What this session set of the settings only pg_idem's owner may change (idem.owner_settings).
CREATE FUNCTION idem.session_owner_settings() RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT 'tenant_grants=' OPERATOR(pg_catalog.||) COALESCE(pg_catalog.current_setting('pg_idem.tenant_grants', true), '')
        OPERATOR(pg_catalog.||) ' max_key_length=' OPERATOR(pg_catalog.||) COALESCE(pg_catalog.current_setting('pg_idem.max_key_length', true), '')
        OPERATOR(pg_catalog.||) ' max_response_bytes=' OPERATOR(pg_catalog.||) COALESCE(pg_catalog.current_setting('pg_idem.max_response_bytes', true), '')
        OPERATOR(pg_catalog.||) ' max_batch_keys=' OPERATOR(pg_catalog.||) COALESCE(pg_catalog.current_setting('pg_idem.max_batch_keys', true), '')
$$;

-- A session's settings that the SQL edition does not follow, each said once per session with
-- a WARNING (the first call of a session, and whenever the session sets one again): a
-- pg_idem.* name pg_idem has not (natively refused: a typo would otherwise go unseen), and a
-- SET of a setting only pg_idem's owner may change (tenant_grants and the limits: any session
-- could otherwise raise its own limits or switch the tenant check off). `seen` is what
-- idem.owner_settings() read of the latter; it is kept in the session so that the next calls
-- pay only that comparison.
CREATE FUNCTION idem.warn_session_settings(seen text) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    last_seen text := COALESCE(pg_catalog.current_setting('pg_idem_sql_edition.seen', true), '');
    setting record;
BEGIN
    IF last_seen OPERATOR(pg_catalog.=) '' THEN
        -- the session's first call: what ALTER DATABASE or ALTER ROLE ... SET gave it
        -- (placeholders are not in pg_settings, so a connection's options stay unseen)
        FOR setting IN SELECT DISTINCT pg_catalog.split_part(c.setting, '=', 1) AS name
                         FROM pg_catalog.pg_db_role_setting AS r,
                              LATERAL pg_catalog.unnest(r.setconfig) AS c(setting)
                        WHERE r.setdatabase OPERATOR(pg_catalog.=) ANY (ARRAY[0, (SELECT d.oid FROM pg_catalog.pg_database AS d
                                   WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())]::pg_catalog.oid[])
                          AND r.setrole OPERATOR(pg_catalog.=) ANY (ARRAY[0, pg_catalog.to_regrole(pg_catalog.quote_ident(SESSION_USER))]::pg_catalog.oid[])
                          AND pg_catalog.starts_with(pg_catalog.lower(c.setting), 'pg_idem.')
                          AND pg_catalog.lower(pg_catalog.split_part(c.setting, '=', 1)) OPERATOR(pg_catalog.<>) ALL
                              (SELECT d.name FROM idem.setting_definitions() AS d)
                        ORDER BY 1 LOOP
            RAISE WARNING USING ERRCODE = 'invalid_name',
                MESSAGE = pg_catalog.format('invalid configuration parameter name "%s"', setting.name),
                DETAIL = '"pg_idem" is a reserved prefix; pg_idem''s SQL edition ignores this setting of ALTER DATABASE or ALTER ROLE.',
                HINT = 'pg_idem''s settings are listed by SELECT name FROM idem.setting_definitions().';
        END LOOP;
    END IF;
    FOR setting IN SELECT d.name, pg_catalog.current_setting(d.name, true) AS value
                     FROM idem.setting_definitions() AS d
                    WHERE d.scope OPERATOR(pg_catalog.=) 'owner'
                      AND COALESCE(pg_catalog.current_setting(d.name, true), '') OPERATOR(pg_catalog.<>) ''
                      -- not said again for the value it was said for
                      AND pg_catalog.strpos(' ' OPERATOR(pg_catalog.||) last_seen OPERATOR(pg_catalog.||) ' ',
                              ' ' OPERATOR(pg_catalog.||) pg_catalog.substr(d.name, 9) OPERATOR(pg_catalog.||) '='
                              OPERATOR(pg_catalog.||) pg_catalog.current_setting(d.name, true) OPERATOR(pg_catalog.||) ' ')
                          OPERATOR(pg_catalog.=) 0
                    ORDER BY d.name LOOP
        RAISE WARNING USING ERRCODE = 'insufficient_privilege',
            MESSAGE = pg_catalog.format('%s set for this session is ignored', setting.name),
            DETAIL = pg_catalog.format('pg_idem''s SQL edition reads %s only from idem.role_settings and idem.settings, which only pg_idem''s owner can change, as natively only a superuser may (this session has it as %L).',
                setting.name, setting.value),
            HINT = pg_catalog.format('As pg_idem''s owner: INSERT INTO idem.settings VALUES (%L, %L) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value (or a row of idem.role_settings for one role).',
                setting.name, setting.value);
    END LOOP;
    PERFORM pg_catalog.set_config('pg_idem_sql_edition.seen', seen, false);
END
$$;

-- The owner's settings of a call that checks the session's own settings first
-- (idem.owner_settings): said once, and again only when the session sets one again.
CREATE FUNCTION idem.owner_settings_said() RETURNS idem.owner_settings
LANGUAGE plpgsql
AS $$
BEGIN
    IF idem.session_owner_settings()
       OPERATOR(pg_catalog.<>) COALESCE(pg_catalog.current_setting('pg_idem_sql_edition.seen', true), '') THEN
        PERFORM idem.warn_session_settings(idem.session_owner_settings());
    END IF;
    RETURN idem.owner_settings_now();
END
$$;

-- The owner's settings of one call, inlined into the call's own expression: no frame and no
-- statement for the usual session, which has called before (pg_idem_sql_edition.seen is set)
-- and has never set one of the settings only pg_idem's owner may change (each is NULL, not
-- even a placeholder). Any other session checks them (idem.owner_settings_said). `warn`:
-- whether to check, which a function a parallel worker may run must not (the check keeps what
-- it saw with set_config). Each function in a call's expression costs the call a lookup and a
-- permission check in every transaction: five NULL tests, not the comparison of what was said.
CREATE FUNCTION idem.owner_settings(warn boolean DEFAULT true) RETURNS idem.owner_settings
-- VOLATILE, so that it is inlined with the check's call in it
LANGUAGE sql
AS $$
    SELECT CASE WHEN NOT warn
                     OR (pg_catalog.current_setting('pg_idem_sql_edition.seen', true) IS NOT NULL
                         AND pg_catalog.current_setting('pg_idem.tenant_grants', true) IS NULL
                         AND pg_catalog.current_setting('pg_idem.max_key_length', true) IS NULL
                         AND pg_catalog.current_setting('pg_idem.max_response_bytes', true) IS NULL
                         AND pg_catalog.current_setting('pg_idem.max_batch_keys', true) IS NULL)
                THEN idem.owner_settings_now()
                ELSE idem.owner_settings_said() END
$$;

-- A session setting (placeholder) as microseconds: default_us when it is unset or ''; else
-- read as natively (idem.setting_value: a number in the setting's unit, or with one of
-- PostgreSQL's units), with the native error for a value PostgreSQL would refuse to SET.
CREATE FUNCTION idem.session_duration_us(setting text, default_us bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    raw text := pg_catalog.current_setting(setting, true);
BEGIN
    IF raw IS NULL OR raw OPERATOR(pg_catalog.=) '' THEN
        RETURN default_us;
    END IF;
    RETURN idem.setting_value(setting, raw, false)::pg_catalog.int8
        OPERATOR(pg_catalog.*) CASE setting WHEN 'pg_idem.ttl' THEN 1000000 ELSE 1000 END;
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
