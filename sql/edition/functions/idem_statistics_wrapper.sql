-- language: sql
-- the keys by state (src/stats/cluster.rs key_counts_sql: one scan of idem.keys), and no
-- counters, as the native edition without shared_preload_libraries (which counts no node
-- either: nodes is how many nodes' counters are summed)
SELECT k.in_progress, k.completed, k.failed, k.stalled, k.expired, k.oldest_in_progress,
       NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
       NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::timestamptz,
       0, ARRAY[]::text[]
FROM idem.key_counts(pg_catalog.clock_timestamp()) AS k
