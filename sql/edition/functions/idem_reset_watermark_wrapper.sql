-- (the ON CONFLICT columns are the table's: a rebuilt key keeps them, not always its name)
#variable_conflict use_column
DECLARE
    s idem.owner_settings := idem.owner_settings();
    previous bigint;
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, stream, 'stream', s.max_key_length);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    IF seq IS NULL THEN
        PERFORM idem.null_argument('seq', 'Pass the message''s sequence number or offset.');
    END IF;
    SELECT w.watermark INTO previous FROM idem.watermarks AS w
     WHERE w.tenant OPERATOR(pg_catalog.=) idem_reset_watermark.tenant AND w.stream OPERATOR(pg_catalog.=) idem_reset_watermark.stream
       FOR UPDATE OF w;
    INSERT INTO idem.watermarks AS w (tenant, stream, watermark, updated_at)
    VALUES (idem_reset_watermark.tenant, idem_reset_watermark.stream, seq, pg_catalog.clock_timestamp())
    ON CONFLICT (tenant, stream)
    DO UPDATE SET watermark = EXCLUDED.watermark, updated_at = EXCLUDED.updated_at;
    RETURN previous;
END
