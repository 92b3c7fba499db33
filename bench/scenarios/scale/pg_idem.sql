-- scale variant of ../pg_idem.sql: the key is a UUID, bench_uuid(:kind, ...) (scale/schema.sql),
-- kind 4 or 7 from pgbench -D kind=N. Same statements and sanity check as pg_idem.sql.
\set tenant random(1, 100)
\set r random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
SELECT c.fence, 1 / (c.outcome = 'claimed')::int AS ok
  FROM idem_claim('t' || :tenant::int, bench_uuid(:kind, :r::text, now()), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855') AS c \gset
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES ('t' || :tenant::int, bench_uuid(:kind, :r::text, now()), :amount, 'EUR')
RETURNING id AS payment_id \gset
SELECT idem_complete('t' || :tenant::int, bench_uuid(:kind, :r::text, now()), :fence, 201,
       jsonb_build_object('payment_id', :payment_id::bigint, 'status', 'succeeded', 'amount_cents', :amount::bigint));
END;
