-- Every error pg_idem raises, with its SQLSTATE, message, detail and hint.
\pset null '(null)'
\x on
-- 22004: NULL arguments
SELECT * FROM show_error($$SELECT idem_claim(NULL, 'k', 'h')$$);
SELECT * FROM show_error($$SELECT idem_claim('t', NULL, 'h')$$);
SELECT * FROM show_error($$SELECT idem_claim('t', 'k', NULL)$$);
SELECT * FROM show_error($$SELECT idem_complete('t', 'k', NULL, 200)$$);
SELECT * FROM show_error($$SELECT idem_checkpoint('t', 'k', 1, NULL)$$);
SELECT * FROM show_error($$SELECT idem_downstream_key('t', 'k', NULL)$$);
SELECT * FROM show_error($$SELECT idem_request_hash(NULL, '/x', '{}')$$);
SELECT * FROM show_error($$SELECT idem_request_hash('POST', NULL, '{}')$$);
SELECT * FROM show_error($$SELECT * FROM idem_claim_many('t', NULL, ARRAY['h'])$$);
SELECT * FROM show_error($$SELECT * FROM idem_claim_many('t', ARRAY['k'], NULL)$$);
SELECT * FROM show_error($$SELECT * FROM idem_claim_many('t', ARRAY['k', NULL], ARRAY['h', 'h'])$$);
SELECT * FROM show_error($$SELECT * FROM idem_claim_many('t', ARRAY['k'], ARRAY[NULL])$$);
SELECT * FROM show_error($$SELECT * FROM idem_claim_seq('t', 's', NULL)$$);
SELECT * FROM show_error($$SELECT idem_grant_tenant(NULL, 't')$$);
-- 22023: out of range or shape
SELECT * FROM show_error($$SELECT idem_claim('', 'k', 'h')$$);
SELECT * FROM show_error($$SELECT idem_claim('t', repeat('k', 300), 'h')$$);
SELECT * FROM show_error($$SELECT idem_claim('t', 'k', repeat('h', 513))$$);
SELECT * FROM show_error($$SELECT idem_claim('t', 'k', 'h', lease => '0 seconds')$$);
SELECT * FROM show_error($$SELECT idem_claim('t', 'k', 'h', ttl => '101 years')$$);
SELECT * FROM show_error($$SELECT * FROM idem_claim_many('t', ARRAY['a', 'b'], ARRAY['h'])$$);
SELECT * FROM show_error($$SELECT idem_purge(-1)$$);
SELECT * FROM show_error($$SELECT idem_checkpoint('t', 'k', 1, repeat('p', 257))$$);
SELECT * FROM show_error($$SELECT idem_downstream_key('t', 'k', repeat('s', 257))$$);
-- 54000: over a configured limit
SET pg_idem.max_response_bytes = 64;
SELECT * FROM show_error($$SELECT idem_complete('t', 'k', 1, 200, jsonb_build_object('body', repeat('x', 100)))$$);
RESET pg_idem.max_response_bytes;
SET pg_idem.max_batch_keys = 2;
SELECT * FROM show_error($$SELECT * FROM idem_claim_many('t', ARRAY['a', 'b', 'c'], ARRAY['h', 'h', 'h'])$$);
RESET pg_idem.max_batch_keys;
-- P0002 and 55000: fences
SELECT * FROM show_error($$SELECT idem_complete('errors', 'never-claimed', 1, 200)$$);
SELECT fence AS f FROM idem_claim('errors', 'k', 'h', lease => '1 hour') \gset
SELECT * FROM show_error(format($$SELECT idem_complete('errors', 'k', %s, 200)$$, :f - 1));
SELECT * FROM show_error(format($$SELECT idem_heartbeat('errors', 'k', %s)$$, :f + 1));
SELECT idem_complete('errors', 'k', :f, 200) IS NOT NULL AS completed;
SELECT * FROM show_error(format($$SELECT idem_release('errors', 'k', %s)$$, :f));
SELECT fence AS g FROM idem_claim('errors', 'failed', 'h') \gset
SELECT idem_fail_final('errors', 'failed', :g, 500) IS NOT NULL AS failed;
SELECT * FROM show_error(format($$SELECT idem_assert_fence('errors', 'failed', %s)$$, :g));
-- consumers: 22004, 22023, 54000, 55P03 (a key held by an attempt of idem_claim), 55000/P0002
-- from idem_complete_many, naming the element
SELECT * FROM show_error($$SELECT idem_consume(NULL, 'k')$$);
SELECT * FROM show_error($$SELECT idem_consume('t', NULL)$$);
SELECT * FROM show_error($$SELECT idem_consume('t', 'k', '-1 second')$$);
SELECT * FROM show_error($$SELECT * FROM idem_consume_many('t', NULL)$$);
SELECT * FROM show_error($$SELECT * FROM idem_consume_many('t', ARRAY['a', NULL])$$);
SET pg_idem.max_batch_keys = 2;
SELECT * FROM show_error($$SELECT * FROM idem_consume_many('t', ARRAY['a', 'b', 'c'])$$);
RESET pg_idem.max_batch_keys;
SELECT outcome FROM idem_claim('errors', 'held', 'h', lease => '1 hour');
SELECT * FROM show_error($$SELECT idem_consume('errors', 'held')$$);
-- a batch names itself, not idem_consume
SELECT * FROM show_error($$SELECT * FROM idem_consume_many('errors', ARRAY['new', 'held'])$$);
SELECT * FROM show_error($$SELECT * FROM idem_complete_many('errors', ARRAY['a'], ARRAY[1, 2], ARRAY[200])$$);
SELECT * FROM show_error($$SELECT * FROM idem_complete_many('errors', ARRAY['a'], ARRAY[NULL::bigint], ARRAY[200])$$);
SELECT * FROM show_error($$SELECT * FROM idem_complete_many('errors', ARRAY['missing'], ARRAY[1], ARRAY[200])$$);
SELECT * FROM show_error($$SELECT * FROM idem_complete_many('errors', ARRAY['held'], ARRAY[1], ARRAY[200])$$);
-- 42501: tenants as an access boundary (a superuser passes; a plain role does not)
CREATE ROLE regress_idem_app;
SET pg_idem.tenant_grants = on;
SET ROLE regress_idem_app;
SELECT * FROM show_error($$SELECT idem_claim('acme', 'k', 'h')$$);
SELECT * FROM show_error($$SET pg_idem.tenant_grants = off$$);
RESET ROLE;
RESET pg_idem.tenant_grants;
DROP ROLE regress_idem_app;
-- 55000: a DBA changed one of pg_idem's own columns of idem.keys (undone right after)
BEGIN;
ALTER TABLE idem.keys ALTER COLUMN response_code TYPE numeric;
SELECT * FROM show_error($$SELECT idem_claim('errors', 'typed', 'h')$$);
ROLLBACK;
BEGIN;
ALTER TABLE idem.keys ALTER COLUMN tenant TYPE varchar(16);
SELECT * FROM show_error($$SELECT idem_consume('errors', 'narrow')$$);
ROLLBACK;
BEGIN;
ALTER TABLE idem.keys ALTER COLUMN purge_after DROP NOT NULL;
SELECT * FROM show_error($$SELECT idem_forget('errors', 'nullable')$$);
ROLLBACK;
BEGIN;
ALTER TABLE idem.keys ALTER COLUMN fence SET NOT NULL;
SELECT * FROM show_error($$SELECT idem_forget('errors', 'half-updated')$$);
ROLLBACK;
SELECT idem_forget('errors', 'after-undo') AS forgot;
