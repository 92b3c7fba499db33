-- A hostile search_path (run.sh applies it to every database of the suite): the role mallory
-- owns a schema that comes first on the database's search_path and holds a look-alike of every
-- idem_* function of pg_idem's schema, with the same arguments, defaults and result, which raises when it
-- runs. A package that called pg_idem's functions through the search_path would run mallory's
-- code (here: fail every request); contract 2 qualifies every call (clients/CONTRACT.md).
-- psql -v schema=... names pg_idem's schema.
CREATE ROLE mallory NOLOGIN;
CREATE SCHEMA mallory AUTHORIZATION mallory;
GRANT USAGE ON SCHEMA mallory TO PUBLIC;
SET pg_idem_test.schema = :'schema';
DO $$
DECLARE
    f record;
BEGIN
    FOR f IN
        SELECT p.proname, pg_catalog.pg_get_function_arguments(p.oid) AS args,
               pg_catalog.pg_get_function_identity_arguments(p.oid) AS identity,
               pg_catalog.pg_get_function_result(p.oid) AS result
        FROM pg_catalog.pg_proc AS p
        WHERE p.pronamespace = pg_catalog.current_setting('pg_idem_test.schema')::regnamespace
          AND p.proname LIKE 'idem\_%'
    LOOP
        EXECUTE pg_catalog.format('CREATE FUNCTION mallory.%I(%s) RETURNS %s LANGUAGE plpgsql AS %L',
            f.proname, f.args, f.result,
            pg_catalog.format('BEGIN RAISE EXCEPTION %L; END', 'look-alike mallory.' || f.proname || ' ran'));
        EXECUTE pg_catalog.format('ALTER FUNCTION mallory.%I(%s) OWNER TO mallory', f.proname, f.identity);
    END LOOP;
END
$$;
SELECT pg_catalog.format('ALTER DATABASE %I SET search_path = mallory, "$user", public', pg_catalog.current_database()) \gexec
