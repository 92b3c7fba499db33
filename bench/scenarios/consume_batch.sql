-- consume_batch: idem_consume_many, a batch of 100 messages per transaction, one statement:
-- the same array of ids as `inbox_batch` (seed-1..seed-100 from a random seed sent by the
-- client), the new messages it returns feed the same business INSERT in the same statement.
-- 1 / (count = 100) fails the run unless all 100 were new and got their business row.
\set sub random(1, 10)
\set seed random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
WITH new AS (
    SELECT * FROM idem_consume_many('sub-' || :sub::int,
                                    ARRAY(SELECT :seed::text || '-' || g FROM generate_series(1, 100) AS g)) AS m(message_id)),
paid AS (
    INSERT INTO payments (tenant, idem_key, amount_cents, currency)
    SELECT 'sub-' || :sub::int, message_id, :amount, 'EUR' FROM new
    RETURNING 1)
SELECT 1 / (count(*) = 100)::int AS ok FROM paid \gset
END;
