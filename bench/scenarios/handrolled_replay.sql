-- handrolled_replay: the duplicate path of the hand-written pattern (`handrolled`), the
-- counterpart of `replay`. A team that records its keys with INSERT ... ON CONFLICT DO NOTHING
-- RETURNING (as `handrolled` does) learns that a request is a duplicate when that INSERT returns
-- no row, then reads the stored response. Here both happen in one statement in autocommit (one
-- round trip, as `replay`): the INSERT in a CTE, the read of the stored row beside it (same
-- snapshot: the row that was there before the statement). The pool is the one `replay` uses,
-- filled through the hand-written lifecycle (fill_handrolled in run.py, tag 'replay': tenant
-- 't' || (i % 100 + 1), key md5('replay/' || i)::uuid, small response body, completed).
-- 1 / (...)::int fails the run unless the key was there, completed, with the same request
-- hash, and the INSERT added nothing; \gset fails it when no row is found.
\set i random(1, :pool)
WITH s AS (SELECT 't' || (:i % 100 + 1) AS tenant, md5('replay/' || :i)::uuid::text AS k),
ins AS (
    INSERT INTO handrolled_keys (tenant, key, request_hash, status, expires_at)
    SELECT s.tenant, s.k, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'in_progress', now() + interval '24 hours'
      FROM s
    ON CONFLICT DO NOTHING
    RETURNING key)
SELECT h.response_code, h.response_body,
       1 / (h.status = 'completed' AND h.expires_at >= now()
            AND h.request_hash = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'
            AND NOT EXISTS (SELECT FROM ins))::int AS ok
  FROM s JOIN handrolled_keys h ON h.tenant = s.tenant AND h.key = s.k \gset
