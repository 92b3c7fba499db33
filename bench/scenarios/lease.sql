-- lease: lease mode. Claim with a lease and commit; then the business INSERT and idem_complete
-- in a second transaction (the work between them would call out to another system). The key
-- comes from the client, as in every scenario.
\set tenant random(1, 100)
\set k random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
SELECT c.fence, 1 / (c.outcome = 'claimed')::int AS ok
  FROM idem_claim('t' || :tenant::int, :k, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', lease => interval '30 seconds') AS c \gset
END;
BEGIN;
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES ('t' || :tenant::int, :k, :amount, 'EUR')
RETURNING id AS payment_id \gset
SELECT idem_complete('t' || :tenant::int, :k, :fence, 201,
       jsonb_build_object('payment_id', :payment_id::bigint, 'status', 'succeeded', 'amount_cents', :amount::bigint));
END;
