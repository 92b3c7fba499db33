-- replay: idem_claim on keys that are already completed (the duplicate path). The runner fills
-- a pool of :pool completed keys beforehand (fill_idem in run.py, tag 'replay': tenant
-- 't' || (i % 100 + 1), key md5('replay/' || i)::uuid, small response body).
-- One statement in its own (autocommit) transaction: one round trip, as a duplicate costs in
-- lease mode, where the claim is a transaction of its own. In one-transaction mode the client's
-- BEGIN and COMMIT around the claim add two round trips that pg_idem has no part in.
-- The key is computed inline: a SQL helper function here would be run by fmgr_sql and planned
-- again on every call, and cost more than the claim itself.
-- 1 / (outcome = 'completed') fails the run if a key is not found completed.
\set i random(1, :pool)
SELECT c.response_code, c.response_body, 1 / (c.outcome = 'completed')::int AS ok
  FROM (SELECT 't' || (:i % 100 + 1) AS tenant, md5('replay/' || :i)::uuid::text AS k) AS s,
       LATERAL idem_claim(s.tenant, s.k, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855') AS c \gset
