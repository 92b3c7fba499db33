-- The golden tests run in one database, in order: setup, api, errors, usage.
CREATE EXTENSION pg_idem;
SELECT extversion FROM pg_extension WHERE extname = 'pg_idem';
-- a helper that shows an error as its parts, so the expected output pins the SQLSTATE, message,
-- detail and hint of each (and nothing that changes from run to run: fences, which come from a
-- clock, show as <fence>, a lease's end as <time>)
CREATE FUNCTION show_error(statement text)
RETURNS TABLE (code text, message text, detail text, hint text)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    code := 'no error';
    RETURN NEXT;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
        detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    detail := regexp_replace(regexp_replace(detail, '([Ff]ence) -?\d+', '\1 <fence>', 'g'),
        '(runs until ).*$', '\1<time>.');
    RETURN NEXT;
END
$$;
