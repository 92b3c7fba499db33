-- (the ON CONFLICT columns are the table's: a rebuilt key keeps them, not always its name)
#variable_conflict use_column
DECLARE
    s idem.owner_settings := idem.owner_settings();
    now timestamptz;
BEGIN
    PERFORM idem.check_tenant_and_key(tenant, stream, 'stream', s.max_key_length);
    PERFORM idem.check_access(tenant, s.tenant_grants);
    IF seq IS NULL THEN
        PERFORM idem.null_argument('seq', 'Pass the message''s sequence number or offset.');
    END IF;
    now := pg_catalog.clock_timestamp();
    -- the watermark moves inside the caller's transaction; a second call on the stream waits
    -- for this one's transaction (it holds the row), as only then is it known what is new
    INSERT INTO idem.watermarks AS w (tenant, stream, watermark, updated_at)
    VALUES (idem_claim_seq.tenant, idem_claim_seq.stream, seq, now)
    ON CONFLICT (tenant, stream)
    DO UPDATE SET watermark = EXCLUDED.watermark, updated_at = EXCLUDED.updated_at
       WHERE w.watermark OPERATOR(pg_catalog.<) EXCLUDED.watermark
    RETURNING w.watermark INTO idem_claim_seq.watermark;
    IF FOUND THEN
        outcome := 'new';
        RETURN;
    END IF;
    -- the row is locked by the upsert: this reads its latest committed value
    outcome := 'duplicate';
    SELECT w.watermark INTO idem_claim_seq.watermark FROM idem.watermarks AS w
     WHERE w.tenant OPERATOR(pg_catalog.=) idem_claim_seq.tenant AND w.stream OPERATOR(pg_catalog.=) idem_claim_seq.stream;
END
