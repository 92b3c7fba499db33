-- scale variant of ../inbox_batch.sql: the 100 message ids are UUIDs,
-- bench_uuid(:kind, seed || '-' || g, now()) (scale/schema.sql), the same array as
-- scale/consume_batch.sql. Same sanity check: 1 / (count = 100).
\set sub random(1, 10)
\set seed random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
WITH new AS (
    INSERT INTO processed_messages (subscriber_id, message_id)
    SELECT 'sub-' || :sub::int, m
      FROM unnest(ARRAY(SELECT bench_uuid(:kind, :seed::text || '-' || g, now()) FROM generate_series(1, 100) AS g)) AS m
    ON CONFLICT DO NOTHING
    RETURNING message_id),
paid AS (
    INSERT INTO payments (tenant, idem_key, amount_cents, currency)
    SELECT 'sub-' || :sub::int, message_id, :amount, 'EUR' FROM new
    RETURNING 1)
SELECT 1 / (count(*) = 100)::int AS ok FROM paid \gset
END;
