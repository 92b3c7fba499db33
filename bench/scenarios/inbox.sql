-- inbox: the hand-written inbox a message consumer writes, one message per transaction:
-- INSERT ... ON CONFLICT DO NOTHING into processed_messages (schema.sql) says whether the
-- message is new, then the business INSERT, in one transaction, one statement per step. The
-- message id comes from the client (a random 63-bit number, as text), subscribers sub-1..sub-10.
-- RETURNING ... \gset fails the run when the message was not new (no row returned), so the
-- business INSERT runs for exactly the new messages: all of them.
\set sub random(1, 10)
\set m random(1, 9223372036854775807)
\set amount random(100, 99999)
BEGIN;
INSERT INTO processed_messages (subscriber_id, message_id)
VALUES ('sub-' || :sub::int, :m)
ON CONFLICT DO NOTHING
RETURNING message_id \gset
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES ('sub-' || :sub::int, :m, :amount, 'EUR');
END;
