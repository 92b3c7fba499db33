-- pg_idem 0.3.0 -> 0.4.0. Runs inside the transaction of ALTER EXTENSION pg_idem UPDATE: all of
-- it or none of it. Keys, fences, watermarks and grants are untouched.

-- 1. The C functions run with the caller's rights. fmgr's SECURITY DEFINER call (the function's
-- settings parsed, a GUC nest level, search_path set and restored, the user switched) was paid on
-- every call, and the engine path needs none of it: the table and index access methods check no
-- privileges and resolve no names. What goes through SQL (the SPI path, the purge, the fence
-- sequence, tenant grants, watermarks) switches to the extension's owner with search_path pinned
-- to pg_catalog, pg_temp in C (src/owner.rs), as these declarations did before.
ALTER FUNCTION idem_complete(text, text, bigint, integer, jsonb) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_fail_final(text, text, bigint, integer, jsonb) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_release(text, text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_heartbeat(text, text, bigint, interval) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_forget(text, text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_purge(integer) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_claim_many(text, text[], text[], interval, interval) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_checkpoint(text, text, bigint, text, jsonb) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_assert_fence(text, text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_claim_seq(text, text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_watermark(text, text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_reset_watermark(text, text, bigint) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_grant_tenant(regrole, text) SECURITY INVOKER RESET search_path;
ALTER FUNCTION idem_revoke_tenant(regrole, text) SECURITY INVOKER RESET search_path;

-- 2. idem_claim returns a named composite type instead of OUT parameters (same columns, in the
-- same order): a statement that calls it in FROM then copies its result descriptor from the
-- type cache at executor start, where OUT parameters made it parse the function's argument
-- arrays and look up every column's type, each time a prepared statement ran. A function's
-- result type cannot be altered: it is dropped and created again. A view or a SQL-standard
-- function of the application that calls idem_claim makes the DROP fail (nothing is changed
-- then): drop it before ALTER EXTENSION pg_idem UPDATE and create it again after. On a Citus
-- cluster, run SELECT idem_distribute() afterwards, which delegates the new function again.
DROP FUNCTION idem_claim(text, text, text, interval, interval);

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
