-- The core SQL API. The C functions run with the caller's rights: on the engine path they read
-- and write idem.* through the table and index access methods, which check no privileges and
-- resolve no names, and whatever goes through SQL (the SPI path, the purge, the fence sequence)
-- runs as the extension's owner with search_path pinned to pg_catalog, pg_temp, switched in C
-- (src/pg/owner.rs), as SECURITY DEFINER SET search_path did for every call before 0.4.0. The SQL
-- they run qualifies every name and operator as well.
-- None is STRICT: a NULL argument raises 22004 naming the argument instead of returning NULL.

-- The row idem_claim returns. A named type rather than OUT parameters: a statement that calls
-- the function in FROM builds its result descriptor at executor start, which for OUT parameters
-- means parsing the function's argument arrays and looking up every column's type, each time a
-- prepared statement runs; for a named type it is a copy from the type cache.
CREATE TYPE idem_claim_result AS (
    outcome text,
    fence bigint,
    attempt integer,
    response_code integer,
    response_body jsonb,
    lease_expires_at timestamptz,
    expires_at timestamptz,
    checkpoint_phase text,
    checkpoint_data jsonb
);

COMMENT ON TYPE idem_claim_result IS
'The result of idem_claim: the outcome, and what goes with it (see the function reference)';

CREATE FUNCTION idem_claim(
    tenant text,
    key text,
    request_hash text,
    lease interval DEFAULT NULL,
    ttl interval DEFAULT NULL
) RETURNS idem_claim_result
LANGUAGE c VOLATILE PARALLEL UNSAFE
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
LANGUAGE c VOLATILE PARALLEL UNSAFE
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
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_fail_final_wrapper';

COMMENT ON FUNCTION idem_fail_final(text, text, bigint, integer, jsonb) IS
'Store a final error of the attempt holding this fence, replayed like a completion; returns the new expires_at';

CREATE FUNCTION idem_release(
    tenant text,
    key text,
    fence bigint
) RETURNS void
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_release_wrapper';

COMMENT ON FUNCTION idem_release(text, text, bigint) IS
'Give the key up after a transient failure: the claim is removed and the next retry gets a fresh claimed';

CREATE FUNCTION idem_heartbeat(
    tenant text,
    key text,
    fence bigint,
    lease interval DEFAULT NULL
) RETURNS timestamptz
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_heartbeat_wrapper';

COMMENT ON FUNCTION idem_heartbeat(text, text, bigint, interval) IS
'Extend the lease of the attempt holding this fence; returns the new lease_expires_at';

CREATE FUNCTION idem_forget(
    tenant text,
    key text
) RETURNS boolean
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_forget_wrapper';

COMMENT ON FUNCTION idem_forget(text, text) IS
'Drop a key in any state; true if there was one';

CREATE FUNCTION idem_purge(
    max_rows integer DEFAULT NULL
) RETURNS bigint
LANGUAGE c VOLATILE PARALLEL UNSAFE
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

CREATE FUNCTION idem_version() RETURNS text
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_version_wrapper';

COMMENT ON FUNCTION idem_version() IS
'The version of pg_idem that answers: natively its library (pg_extension has its SQL objects''), in the SQL edition its install; an update starts from this version';

-- A fence written to idem.keys by anything but pg_idem's own writes (a restore's COPY, an
-- INSERT by hand, a logical replica's apply, hence ALWAYS) lifts the fence clock to it when the
-- write happens: a server that handed out fences before draws every later one above the
-- restored ones (src/store/fences.rs). The engine writes without the executor and accepts this
-- trigger, and no other (src/pg/heap/checks.rs). The SQL edition creates no trigger: its function is
-- no C function there, and its fences come from idem.fence_seq, which a restore sets.
-- idem_distribute drops it: Citus distributes no table with triggers.
CREATE FUNCTION idem.lift_fence_clock() RETURNS trigger
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'idem_lift_fence_clock_wrapper';
REVOKE ALL ON FUNCTION idem.lift_fence_clock() FROM PUBLIC;

DO $lift$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc AS p
                 JOIN pg_catalog.pg_language AS l ON l.oid OPERATOR(pg_catalog.=) p.prolang
                WHERE p.oid OPERATOR(pg_catalog.=) 'idem.lift_fence_clock()'::pg_catalog.regprocedure
                  AND l.lanname OPERATOR(pg_catalog.=) 'c') THEN
        CREATE TRIGGER lift_fence_clock AFTER INSERT OR UPDATE OF fence ON idem.keys
        FOR EACH ROW EXECUTE FUNCTION idem.lift_fence_clock();
        ALTER TABLE idem.keys ENABLE ALWAYS TRIGGER lift_fence_clock;
    END IF;
END
$lift$;
