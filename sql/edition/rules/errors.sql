-- The SQL edition's rules, one file of sql/edition/rules/ per module of src/ they mirror
-- (installed in the order scripts/sql_edition.py lists them, this file first): the same
-- decisions as the native edition's rules/ and src/rules/ (claims, consumes, fenced calls, a
-- key's times) and src/store/spi.rs (how a key is locked, read and written), with the same
-- errors (src/errors.rs) and argument checks (src/sql_api/args.rs).
-- tests/sql_edition.rs runs the same calls against both editions and compares every answer
-- and every error field by field.
--
-- These functions live in schema idem, which only pg_idem's owner may use; the public
-- functions (sql/edition/functions/) are SECURITY DEFINER with search_path pinned to
-- pg_catalog, pg_temp and call them as the owner, so they run under that path. They carry no
-- SET clause of their own: a function with one is never inlined, and from PL/pgSQL a LANGUAGE
-- sql function that is not inlined is planned anew at every call. Every name and operator is
-- qualified anyway.

-- ---------------------------------------------------------------------------------------------
-- Errors (src/errors.rs): one SQLSTATE per kind, a message naming the argument, detail, hint
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION idem.raise_error(code text, message text, detail text, hint text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    -- RAISE refuses a NULL option: an error without a detail or a hint leaves it out
    IF detail IS NULL AND hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
    ELSIF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, HINT = hint;
    ELSIF hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail;
    END IF;
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = detail, HINT = hint;
END
$$;

CREATE FUNCTION idem.null_argument(argument text, hint text) RETURNS void
LANGUAGE sql
AS $$
    SELECT idem.raise_error('22004', pg_catalog.format('argument "%s" must not be null', argument),
        pg_catalog.format('pg_idem cannot act on a NULL %s.', argument), hint)
$$;

CREATE FUNCTION idem.invalid_argument(argument text, problem text, detail text, hint text) RETURNS void
LANGUAGE sql
AS $$
    SELECT idem.raise_error('22023', pg_catalog.format('argument "%s" %s', argument, problem), detail, hint)
$$;

CREATE FUNCTION idem.too_large(argument text, detail text, hint text) RETURNS void
LANGUAGE sql
AS $$
    SELECT idem.raise_error('54000', pg_catalog.format('argument "%s" is too large', argument), detail, hint)
$$;
