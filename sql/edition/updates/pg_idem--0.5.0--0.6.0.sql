-- pg_idem 0.5.0 -> 0.6.0, the SQL edition's own objects (scripts/sql_edition.py puts this after
-- the native sql/pg_idem--0.5.0--0.6.0.sql, and the part after the line "after the functions"
-- after every function of 0.6.0). 0.5.0 is the release at commit ef35c48;
-- tests/sql_edition/sql_edition_updates.rs updates its install, plainly and through pg_tle, and
-- compares the database with a fresh install of 0.6.0.

-- The owner's settings of a call also carry the defaults of the session settings
-- (sql/edition/settings.sql): three attributes at the end, as a fresh install has them.
ALTER TYPE idem.owner_settings
    ADD ATTRIBUTE lease_us bigint,
    ADD ATTRIBUTE ttl_us bigint,
    ADD ATTRIBUTE reject_stale_uuidv7 boolean;

-- Key lock ids are keyed with a secret drawn here, readable by pg_idem's owner only
-- (sql/edition/hashing.sql). Locks taken before the update have other ids: a claim then checks
-- the key's row, which decides, as it does for any lock it sees.
CREATE TABLE idem.key_lock_secret (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    secret bytea NOT NULL CHECK (pg_catalog.octet_length(secret) OPERATOR(pg_catalog.>=) 16)
);
INSERT INTO idem.key_lock_secret (secret)
SELECT pg_catalog.decode(pg_catalog.replace(pg_catalog.gen_random_uuid()::pg_catalog.text
           OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid()::pg_catalog.text, '-', ''), 'hex');

-- idem.settings takes every setting of idem.setting_definitions(), each value checked when it
-- is written (the CHECK below, after the functions that check it): 0.5.0's list of names goes.
ALTER TABLE idem.settings DROP CONSTRAINT settings_name_check;
COMMENT ON TABLE idem.settings IS
'pg_idem (SQL edition) settings for this database, which only its owner may change; a missing row is the default';

-- The purge in passing counts its draws now (rules/purge.sql): its third argument has another
-- name and a default, which CREATE OR REPLACE cannot give it.
DROP FUNCTION idem.purge_in_passing(timestamptz, text, integer);

-- after the functions

-- The rows 0.5.0 kept, as 0.6.0 stores them: a Boolean as on or off, a number as the native
-- base unit's. A value 0.6.0 refuses (0.5.0 checked none) stops the update with the native
-- error naming the setting, and nothing is changed: correct the row, then run the update again.
UPDATE idem.settings SET value = idem.setting_value(name, value, false);
ALTER TABLE idem.settings
    ADD CONSTRAINT settings_value_check CHECK (idem.setting_value(name, value, false) OPERATOR(pg_catalog.=) value);

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

CREATE TRIGGER settings_row BEFORE INSERT OR UPDATE ON idem.settings
    FOR EACH ROW EXECUTE FUNCTION idem.settings_row();
CREATE TRIGGER settings_row BEFORE INSERT OR UPDATE ON idem.role_settings
    FOR EACH ROW EXECUTE FUNCTION idem.settings_row();
CREATE TRIGGER settings_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idem.settings
    FOR EACH STATEMENT EXECUTE FUNCTION idem.settings_changed();
CREATE TRIGGER settings_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON idem.role_settings
    FOR EACH STATEMENT EXECUTE FUNCTION idem.settings_changed();
