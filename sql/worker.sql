-- What the purge workers are doing (src/worker/). It shows every database's worker, so PUBLIC
-- cannot call it; members of pg_monitor can.

CREATE FUNCTION idem_purge_status(
    OUT database text,
    OUT pid integer,
    OUT state text,
    OUT started_at timestamptz,
    OUT starts bigint,
    OUT last_pass_at timestamptz,
    OUT last_pass_keys bigint,
    OUT last_pass_batches bigint,
    OUT last_pass_ms bigint,
    OUT total_keys bigint,
    OUT total_passes bigint,
    OUT total_batches bigint
) RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_purge_status_wrapper';

COMMENT ON FUNCTION idem_purge_status() IS
'One row per database in pg_idem.database: its purge worker''s state, last pass and totals since it started';

REVOKE ALL ON FUNCTION idem_purge_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idem_purge_status() TO pg_monitor;
