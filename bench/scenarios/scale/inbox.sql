-- scale variant of ../inbox.sql: the message id is a UUID, bench_uuid(:kind, ...)
-- (scale/schema.sql), kind 4 or 7 from pgbench -D kind=N. Same sanity check: RETURNING \gset.
\set sub random(1, 10)
\set r random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
INSERT INTO processed_messages (subscriber_id, message_id)
VALUES ('sub-' || :sub::int, bench_uuid(:kind, :r::text, now()))
ON CONFLICT DO NOTHING
RETURNING message_id \gset
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES ('sub-' || :sub::int, bench_uuid(:kind, :r::text, now()), :amount, 'EUR');
END;
