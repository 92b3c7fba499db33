-- The core SQL API. Every function that touches idem.* runs with the extension owner's rights
-- (SECURITY DEFINER) and a pinned search_path; the C code qualifies every name it uses as well.
-- None is STRICT: a NULL argument raises 22004 naming the argument instead of returning NULL.

CREATE FUNCTION idem_claim(
    tenant text,
    key text,
    request_hash text,
    lease interval DEFAULT NULL,
    ttl interval DEFAULT NULL,
    OUT outcome text,
    OUT fence bigint,
    OUT attempt integer,
    OUT response_code integer,
    OUT response_body jsonb,
    OUT lease_expires_at timestamptz,
    OUT expires_at timestamptz,
    OUT checkpoint_phase text,
    OUT checkpoint_data jsonb
) RETURNS record
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_claim_wrapper';

COMMENT ON FUNCTION idem_claim(text, text, text, interval, interval) IS
'Claim an idempotency key inside the business transaction: outcome claimed, completed, failed, in_progress, mismatch or stale_key';

CREATE FUNCTION idem_complete(
    tenant text,
    key text,
    fence bigint,
    response_code integer,
    response_body jsonb DEFAULT NULL
) RETURNS timestamptz
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_complete_wrapper';

COMMENT ON FUNCTION idem_complete(text, text, bigint, integer, jsonb) IS
'Store the response of the attempt holding this fence; returns the new expires_at. Raises 55000 when the lease was lost, P0002 when the key does not exist';

CREATE FUNCTION idem_fail_final(
    tenant text,
    key text,
    fence bigint,
    response_code integer,
    response_body jsonb DEFAULT NULL
) RETURNS timestamptz
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_fail_final_wrapper';

COMMENT ON FUNCTION idem_fail_final(text, text, bigint, integer, jsonb) IS
'Store a final error of the attempt holding this fence, replayed like a completion; returns the new expires_at';

CREATE FUNCTION idem_release(
    tenant text,
    key text,
    fence bigint
) RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_release_wrapper';

COMMENT ON FUNCTION idem_release(text, text, bigint) IS
'Give the key up after a transient failure: the claim is removed and the next retry gets a fresh claimed';

CREATE FUNCTION idem_heartbeat(
    tenant text,
    key text,
    fence bigint,
    lease interval DEFAULT NULL
) RETURNS timestamptz
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_heartbeat_wrapper';

COMMENT ON FUNCTION idem_heartbeat(text, text, bigint, interval) IS
'Extend the lease of the attempt holding this fence; returns the new lease_expires_at';

CREATE FUNCTION idem_forget(
    tenant text,
    key text
) RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_forget_wrapper';

COMMENT ON FUNCTION idem_forget(text, text) IS
'Drop a key in any state; true if there was one';

CREATE FUNCTION idem_purge(
    max_rows integer DEFAULT NULL
) RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'idem_purge_wrapper';

COMMENT ON FUNCTION idem_purge(integer) IS
'Delete expired keys now (at most max_rows, all when NULL) and return how many; the purge worker runs the same code';

CREATE FUNCTION idem_request_hash(
    body jsonb
) RETURNS text
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_request_hash_body_wrapper';

COMMENT ON FUNCTION idem_request_hash(jsonb) IS
'Lowercase hex SHA-256 of the canonical form of a JSON value (keys sorted, no whitespace, numbers normalised)';

CREATE FUNCTION idem_request_hash(
    method text,
    path text,
    body jsonb
) RETURNS text
LANGUAGE c IMMUTABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_request_hash_request_wrapper';

COMMENT ON FUNCTION idem_request_hash(text, text, jsonb) IS
'Lowercase hex SHA-256 of the canonical form of [upper(method), path, body]';

CREATE FUNCTION idem_new_key() RETURNS uuid
LANGUAGE c VOLATILE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_new_key_wrapper';

COMMENT ON FUNCTION idem_new_key() IS
'A new UUIDv7: time-ordered, so keys that arrive together sit together in the index';
