-- language: sql
-- as the native edition without shared_preload_libraries: no purge worker runs, so no rows;
-- expired keys go with idem_purge() (scheduled with pg_cron, or by the application)
SELECT NULL::text, NULL::integer, NULL::text, NULL::timestamptz, NULL::bigint, NULL::timestamptz,
       NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint
WHERE false
