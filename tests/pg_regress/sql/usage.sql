-- The README's usage examples, as they print (fences and timestamps left out: they differ
-- from run to run).
BEGIN;
SELECT outcome, attempt, fence
FROM idem_claim('acme', 'order-1001', idem_request_hash('POST', '/payments', '{"amount": 42.00}')) \gset
SELECT :'outcome' AS outcome, :attempt AS attempt;
-- a second claim of the key while this transaction holds it
SELECT outcome, fence FROM idem_claim('acme', 'order-1001', idem_request_hash('POST', '/payments', '{"amount": 42.00}'));
SELECT idem_complete('acme', 'order-1001', :fence, 201, '{"payment_id": 7}') > now() AS expires_later;
COMMIT;
-- a retry replays the stored response
SELECT outcome, response_code, response_body
FROM idem_claim('acme', 'order-1001', idem_request_hash('post', '/payments', '{"amount":42.0}'));
-- the same key for another request is a client bug
SELECT outcome, response_code, response_body
FROM idem_claim('acme', 'order-1001', idem_request_hash('POST', '/payments', '{"amount": 4200}'));
-- request fingerprints are canonical
SELECT idem_request_hash('{"b": [1, 2.50], "a": {"y": null, "x": true}}')
     = idem_request_hash('{"a":{"x":true,"y":null},"b":[1,2.5]}') AS same;
SELECT idem_request_hash('{}');
SELECT idem_downstream_key('acme', 'order-1001', 'charge');
-- batch claims, one row per key, in order
SELECT key, outcome, attempt FROM idem_claim_many('acme', ARRAY['b1', 'b2', 'order-1001'], ARRAY['h', 'h', 'h']);
-- ordered streams
SELECT * FROM idem_claim_seq('acme', 'orders', 41);
SELECT * FROM idem_claim_seq('acme', 'orders', 41);
SELECT idem_watermark('acme', 'orders');
-- what happened
SELECT keys_in_progress, keys_completed, keys_failed FROM idem_stats();
SELECT tenant, keys_in_progress, keys_completed FROM idem_tenant_stats() ORDER BY tenant;
