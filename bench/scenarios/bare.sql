-- bare: the business INSERT alone, in a transaction (the floor).
\set tenant random(1, 100)
\set amount random(100, 99999)
BEGIN;
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES ('t' || :tenant::int, gen_random_uuid()::text, :amount, 'EUR')
RETURNING id AS payment_id \gset
END;
