-- High-watermark dedup of ordered streams (src/sql_api/streams.rs), kept in idem.watermarks: one row per
-- stream, whatever the number of messages.

CREATE FUNCTION idem_claim_seq(
    tenant text,
    stream text,
    seq bigint,
    OUT outcome text,
    OUT watermark bigint
) RETURNS record
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_claim_seq_wrapper';

COMMENT ON FUNCTION idem_claim_seq(text, text, bigint) IS
'High-watermark dedup of an ordered stream: new (and the watermark moves to seq, inside this transaction) when seq is above the watermark, else duplicate';

CREATE FUNCTION idem_watermark(tenant text, stream text) RETURNS bigint
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_watermark_wrapper';

COMMENT ON FUNCTION idem_watermark(text, text) IS
'The watermark of a stream, NULL when it has none';

CREATE FUNCTION idem_reset_watermark(tenant text, stream text, seq bigint) RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_reset_watermark_wrapper';

COMMENT ON FUNCTION idem_reset_watermark(text, text, bigint) IS
'Set the watermark of a stream (for example to replay from an earlier offset); returns the previous one';
