-- scale variant of ../handrolled.sql: the key is a UUID, bench_uuid(:kind, ...) (scale/schema.sql),
-- kind 4 or 7 from pgbench -D kind=N. Same statements and sanity checks (\gset wants one row).
\set tenant random(1, 100)
\set r random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
INSERT INTO handrolled_keys (tenant, key, request_hash, status, expires_at)
VALUES ('t' || :tenant::int, bench_uuid(:kind, :r::text, now()), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'in_progress', now() + interval '24 hours')
ON CONFLICT DO NOTHING
RETURNING key \gset
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES ('t' || :tenant::int, bench_uuid(:kind, :r::text, now()), :amount, 'EUR')
RETURNING id AS payment_id \gset
UPDATE handrolled_keys
   SET status = 'completed', response_code = 201,
       response_body = jsonb_build_object('payment_id', :payment_id::bigint, 'status', 'succeeded', 'amount_cents', :amount::bigint)
 WHERE tenant = 't' || :tenant::int AND key = bench_uuid(:kind, :r::text, now())
RETURNING response_code AS stored \gset
END;
