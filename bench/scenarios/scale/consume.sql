-- scale variant of ../consume.sql: the message id is a UUID, bench_uuid(:kind, ...)
-- (scale/schema.sql), kind 4 or 7 from pgbench -D kind=N. Same sanity check: 1 / (new)::int.
\set sub random(1, 10)
\set r random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
SELECT 1 / idem_consume('sub-' || :sub::int, bench_uuid(:kind, :r::text, now()))::int AS ok \gset
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES ('sub-' || :sub::int, bench_uuid(:kind, :r::text, now()), :amount, 'EUR');
END;
