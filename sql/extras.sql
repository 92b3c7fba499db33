-- Beyond single claims (src/sql_api/extras.rs): batch claims, checkpoints for multi-step work, a fence
-- guard for business rows, and deterministic keys for downstream calls.

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
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_claim_many_wrapper';

COMMENT ON FUNCTION idem_claim_many(text, text[], text[], interval, interval) IS
'Claim many keys of one tenant in one round trip: one row per input element, in input order, with the columns of idem_claim';

CREATE FUNCTION idem_checkpoint(
    tenant text,
    key text,
    fence bigint,
    phase text,
    data jsonb DEFAULT NULL
) RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_checkpoint_wrapper';

COMMENT ON FUNCTION idem_checkpoint(text, text, bigint, text, jsonb) IS
'Record the progress of the attempt holding this fence; a claim that takes the key over gets it back';

CREATE FUNCTION idem_assert_fence(tenant text, key text, fence bigint) RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_assert_fence_wrapper';

COMMENT ON FUNCTION idem_assert_fence(text, text, bigint) IS
'Lock the key until the end of the transaction if this fence still holds it, else raise 55000 (or P0002)';

CREATE FUNCTION idem_downstream_key(tenant text, key text, step text) RETURNS uuid
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_downstream_key_wrapper';

COMMENT ON FUNCTION idem_downstream_key(text, text, text) IS
'Deterministic UUIDv5 of (tenant, key, step): pass it as the idempotency key of an external call, so every attempt of the step reuses it';
