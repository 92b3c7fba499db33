-- inbox_batch: the hand-written inbox, a batch of 100 messages per transaction, one statement:
-- the batch's ids (built in SQL from a random seed sent by the client: seed-1..seed-100, the
-- same array as in `consume_batch`) go through INSERT ... SELECT ... ON CONFLICT DO NOTHING
-- RETURNING into processed_messages, and the rows it returns (the new messages) feed the
-- business INSERT in the same statement. 1 / (count = 100) fails the run unless all 100 were
-- new and got their business row.
\set sub random(1, 10)
\set seed random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
WITH new AS (
    INSERT INTO processed_messages (subscriber_id, message_id)
    SELECT 'sub-' || :sub::int, m
      FROM unnest(ARRAY(SELECT :seed::text || '-' || g FROM generate_series(1, 100) AS g)) AS m
    ON CONFLICT DO NOTHING
    RETURNING message_id),
paid AS (
    INSERT INTO payments (tenant, idem_key, amount_cents, currency)
    SELECT 'sub-' || :sub::int, message_id, :amount, 'EUR' FROM new
    RETURNING 1)
SELECT 1 / (count(*) = 100)::int AS ok FROM paid \gset
END;
