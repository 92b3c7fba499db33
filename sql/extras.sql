-- Beyond single claims: batch claims, ordered-stream watermarks, checkpoints for multi-step work,
-- a fence guard for business rows, and deterministic keys for downstream calls.

CREATE FUNCTION idem_claim_many(
    tenant text,
    keys text[],
    request_hashes text[],
    lease interval DEFAULT NULL,
    ttl interval DEFAULT NULL
) RETURNS TABLE (
    key text,
    outcome text,
    fence bigint,
    attempt integer,
    response_code integer,
    response_body jsonb,
    lease_expires_at timestamptz,
    expires_at timestamptz,
    checkpoint_phase text,
    checkpoint_data jsonb
)
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_claim_many_wrapper';

COMMENT ON FUNCTION idem_claim_many(text, text[], text[], interval, interval) IS
'Claim many keys of one tenant in one round trip: one row per input element, in input order, with the columns of idem_claim';

CREATE FUNCTION idem_claim_seq(
    tenant text,
    stream text,
    seq bigint,
    OUT outcome text,
    OUT watermark bigint
) RETURNS record
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_claim_seq_wrapper';

COMMENT ON FUNCTION idem_claim_seq(text, text, bigint) IS
'High-watermark dedup of an ordered stream: new (and the watermark moves to seq, inside this transaction) when seq is above the watermark, else duplicate';

CREATE FUNCTION idem_watermark(tenant text, stream text) RETURNS bigint
LANGUAGE c STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_watermark_wrapper';

COMMENT ON FUNCTION idem_watermark(text, text) IS
'The watermark of a stream, NULL when it has none';

CREATE FUNCTION idem_reset_watermark(tenant text, stream text, seq bigint) RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_reset_watermark_wrapper';

COMMENT ON FUNCTION idem_reset_watermark(text, text, bigint) IS
'Set the watermark of a stream (for example to replay from an earlier offset); returns the previous one';

CREATE FUNCTION idem_checkpoint(
    tenant text,
    key text,
    fence bigint,
    phase text,
    data jsonb DEFAULT NULL
) RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_checkpoint_wrapper';

COMMENT ON FUNCTION idem_checkpoint(text, text, bigint, text, jsonb) IS
'Record the progress of the attempt holding this fence; a claim that takes the key over gets it back';

CREATE FUNCTION idem_assert_fence(tenant text, key text, fence bigint) RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_assert_fence_wrapper';

COMMENT ON FUNCTION idem_assert_fence(text, text, bigint) IS
'Lock the key until the end of the transaction if this fence still holds it, else raise 55000 (or P0002)';

CREATE FUNCTION idem_downstream_key(tenant text, key text, step text) RETURNS uuid
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_downstream_key_wrapper';

COMMENT ON FUNCTION idem_downstream_key(text, text, text) IS
'Deterministic UUIDv5 of (tenant, key, step): pass it as the idempotency key of an external call, so every attempt of the step reuses it';
