-- Message consumers (src/sql_api/consumers.rs): exactly-once processing of messages delivered at least
-- once, in one statement (the inbox pattern), and batches claimed with idem_claim_many completed
-- in one round trip. Like the core API, the C functions run with the caller's rights.

CREATE FUNCTION idem_consume(
    tenant text,
    key text,
    ttl interval DEFAULT NULL
) RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_consume_wrapper';

COMMENT ON FUNCTION idem_consume(text, text, interval) IS
'Record a message as processed in this transaction: true when it is new (process it now), false when it was processed already; a duplicate in flight waits for its transaction';

CREATE FUNCTION idem_consume_many(
    tenant text,
    keys text[],
    ttl interval DEFAULT NULL
) RETURNS SETOF text
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 100
AS 'MODULE_PATHNAME', 'idem_consume_many_wrapper';

COMMENT ON FUNCTION idem_consume_many(text, text[], interval) IS
'idem_consume for a batch in one round trip: the keys that are new, each once, in input order';

CREATE FUNCTION idem_complete_many(
    tenant text,
    keys text[],
    fences bigint[],
    response_codes integer[],
    response_bodies jsonb[] DEFAULT NULL
) RETURNS TABLE (
    key text,
    expires_at timestamptz
)
LANGUAGE c VOLATILE PARALLEL UNSAFE ROWS 100
AS 'MODULE_PATHNAME', 'idem_complete_many_wrapper';

COMMENT ON FUNCTION idem_complete_many(text, text[], bigint[], integer[], jsonb[]) IS
'idem_complete for a batch (the i-th fence, code and body for the i-th key) in one round trip; all or nothing: the first refused element raises its error (55000, P0002) and nothing of the batch is stored';
