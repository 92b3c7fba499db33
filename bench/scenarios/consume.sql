-- consume: idem_consume, one message per transaction: same keys, same business INSERT and same
-- round trips as `inbox`. 1 / (new)::int fails the run when the message was not new, so the
-- business INSERT runs for exactly the new messages: all of them.
\set sub random(1, 10)
\set m random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
SELECT 1 / idem_consume('sub-' || :sub::int, :m)::int AS ok \gset
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES ('sub-' || :sub::int, :m, :amount, 'EUR');
END;
