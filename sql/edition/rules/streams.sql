-- ---------------------------------------------------------------------------------------------
-- Streams (src/sql_api/streams.rs)
-- ---------------------------------------------------------------------------------------------

-- A stream's watermark as the latest command left it. VOLATILE on purpose: idem_watermark is
-- declared STABLE (the native declaration), and a STABLE PL/pgSQL body reads with its calling
-- statement's snapshot, blind to an idem_reset_watermark earlier in the same statement, which
-- the native function sees.
CREATE FUNCTION idem.current_watermark(tenant text, stream text) RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT w.watermark FROM idem.watermarks AS w
     WHERE w.tenant OPERATOR(pg_catalog.=) current_watermark.tenant
       AND w.stream OPERATOR(pg_catalog.=) current_watermark.stream
$$;
