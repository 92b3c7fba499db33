-- The set-up of docs/consumers.md's snippets: pg_idem, an invoices table, a message id and a batch.
CREATE EXTENSION IF NOT EXISTS pg_idem;
CREATE TABLE IF NOT EXISTS invoices (message_id text PRIMARY KEY);
\set message_id 'msg-81f3'
\set ids '{msg-1,msg-2,msg-1,msg-81f3}'
