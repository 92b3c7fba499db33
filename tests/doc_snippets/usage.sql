-- The set-up of docs/getting-started-native.md's usage snippets: the business tables and the
-- psql variables the snippets name (a request's key and body, its fingerprint, a response).
CREATE TABLE IF NOT EXISTS payments (id bigserial PRIMARY KEY, amount bigint NOT NULL);
CREATE TABLE IF NOT EXISTS orders (order_id bigint PRIMARY KEY, amount bigint NOT NULL);
\set idempotency_key 'pay-2f1c9e'
\set body '{"amount": 42}'
\set response '{"order_id": 1001}'
SELECT idem_request_hash('POST', '/orders', '{"order_id": 1001}') AS hash \gset
