-- plpgsql: the PL/pgSQL implementation of the same contract (schema.sql), fresh keys (the
-- key comes from the client, as in every scenario).
-- 1 / (outcome = 'claimed') fails the run if a claim ever answers anything but claimed.
\set tenant random(1, 100)
\set k random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
SELECT c.fence, 1 / (c.outcome = 'claimed')::int AS ok
  FROM plpgsql_claim('t' || :tenant::int, :k, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855') AS c \gset
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES ('t' || :tenant::int, :k, :amount, 'EUR')
RETURNING id AS payment_id \gset
SELECT plpgsql_complete('t' || :tenant::int, :k, :fence, 201,
       jsonb_build_object('payment_id', :payment_id::bigint, 'status', 'succeeded', 'amount_cents', :amount::bigint));
END;
