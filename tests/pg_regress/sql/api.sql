-- The SQL API as users see it, and every function of the extension with everything that makes
-- its declaration: a change to any of them shows here.
\df idem_*
\x on
SELECT p.oid::regprocedure AS function,
       pg_get_function_result(p.oid) AS result,
       p.provolatile AS volatility, p.proparallel AS parallel, p.proisstrict AS strict,
       p.prosecdef AS security_definer, p.proconfig AS config, l.lanname AS language,
       CASE WHEN l.lanname = 'c' THEN p.prosrc END AS symbol,
       coalesce(p.proacl::text, '(default)') AS acl
FROM pg_depend d
JOIN pg_proc p ON d.classid = 'pg_proc'::regclass AND p.oid = d.objid
JOIN pg_language l ON l.oid = p.prolang
WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idem')
ORDER BY p.proname, p.oid::regprocedure::text;
\x off
-- arguments, with names and defaults
SELECT p.proname, pg_get_function_arguments(p.oid) AS arguments
FROM pg_proc p
WHERE p.oid IN (SELECT d.objid FROM pg_depend d
                WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
                  AND d.classid = 'pg_proc'::regclass
                  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_idem'))
ORDER BY 1, 2;
-- the settings
SELECT name, setting, unit, context, vartype, short_desc FROM pg_settings
WHERE name LIKE 'pg_idem.%' ORDER BY name;
