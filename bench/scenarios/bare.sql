-- bare: the business INSERT alone, in a transaction (the floor).
-- The key comes from the client (as an API gets it in its Idempotency-Key header), in every
-- scenario alike: a random 63-bit number, as text.
\set tenant random(1, 100)
\set k random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES ('t' || :tenant::int, :k, :amount, 'EUR')
RETURNING id AS payment_id \gset
END;
