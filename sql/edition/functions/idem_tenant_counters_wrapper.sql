-- language: sql
-- as the native edition without shared_preload_libraries: no counters, so no rows
SELECT NULL::text, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
       NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint
WHERE false
