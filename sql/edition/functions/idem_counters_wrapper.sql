-- language: sql
-- the native edition without shared_preload_libraries answers the same: one row, no counters
-- (they live in shared memory, which only the library can allocate)
SELECT NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
       NULL::bigint, NULL::bigint, NULL::bigint, NULL::timestamptz, NULL::bigint, NULL::bigint
