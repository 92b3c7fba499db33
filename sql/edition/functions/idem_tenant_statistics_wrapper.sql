-- language: sql
-- the keys by state per tenant, and no counters (see idem_statistics_wrapper.sql)
SELECT k.tenant, k.in_progress, k.completed, k.failed, k.stalled, k.expired, k.oldest_in_progress,
       NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint,
       NULL::bigint, NULL::bigint
FROM idem.tenant_key_counts(pg_catalog.clock_timestamp()) AS k
ORDER BY k.tenant
