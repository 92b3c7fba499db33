-- The SQL edition's key statistics (the statistics functions' bodies are SQL, checked when
-- they are created: this file comes before them). The same rules as src/stats/cluster.rs's
-- key_counts_sql and rules::key_row::in_sql: expiry is COALESCE(expires_at, purge_after).

CREATE FUNCTION idem.tenant_key_counts(now timestamptz,
    OUT tenant text, OUT in_progress bigint, OUT completed bigint, OUT failed bigint,
    OUT stalled bigint, OUT expired bigint, OUT oldest_in_progress timestamptz)
RETURNS SETOF record
LANGUAGE sql STABLE
AS $$
    SELECT k.tenant,
           pg_catalog.count(*) FILTER (WHERE k.state OPERATOR(pg_catalog.=) 'p' AND NOT (COALESCE(k.expires_at, k.purge_after) OPERATOR(pg_catalog.<) now)),
           pg_catalog.count(*) FILTER (WHERE k.state OPERATOR(pg_catalog.=) 'c' AND NOT (COALESCE(k.expires_at, k.purge_after) OPERATOR(pg_catalog.<) now)),
           pg_catalog.count(*) FILTER (WHERE k.state OPERATOR(pg_catalog.=) 'f' AND NOT (COALESCE(k.expires_at, k.purge_after) OPERATOR(pg_catalog.<) now)),
           pg_catalog.count(*) FILTER (WHERE k.state OPERATOR(pg_catalog.=) 'p' AND NOT (COALESCE(k.expires_at, k.purge_after) OPERATOR(pg_catalog.<) now)
                                       AND (k.lease_expires_at IS NULL OR k.lease_expires_at OPERATOR(pg_catalog.<) now)),
           pg_catalog.count(*) FILTER (WHERE COALESCE(k.expires_at, k.purge_after) OPERATOR(pg_catalog.<) now),
           pg_catalog.min(k.claimed_at) FILTER (WHERE k.state OPERATOR(pg_catalog.=) 'p' AND NOT (COALESCE(k.expires_at, k.purge_after) OPERATOR(pg_catalog.<) now))
    FROM idem.keys AS k GROUP BY k.tenant
$$;

CREATE FUNCTION idem.key_counts(now timestamptz,
    OUT in_progress bigint, OUT completed bigint, OUT failed bigint,
    OUT stalled bigint, OUT expired bigint, OUT oldest_in_progress timestamptz)
RETURNS record
LANGUAGE sql STABLE
AS $$
    SELECT COALESCE(pg_catalog.sum(t.in_progress), 0)::pg_catalog.int8,
           COALESCE(pg_catalog.sum(t.completed), 0)::pg_catalog.int8,
           COALESCE(pg_catalog.sum(t.failed), 0)::pg_catalog.int8,
           COALESCE(pg_catalog.sum(t.stalled), 0)::pg_catalog.int8,
           COALESCE(pg_catalog.sum(t.expired), 0)::pg_catalog.int8,
           pg_catalog.min(t.oldest_in_progress)
    FROM idem.tenant_key_counts(now) AS t
$$;
