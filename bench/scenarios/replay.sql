-- replay: idem_claim on keys that are already completed (the duplicate path). The runner fills
-- a pool of :pool completed keys (bench_replay_key(1..pool), small response body) beforehand.
-- 1 / (outcome = 'completed') fails the run if a key is not found completed.
\set i random(1, :pool)
BEGIN;
SELECT c.response_code, c.response_body, 1 / (c.outcome = 'completed')::int AS ok
  FROM idem_claim(bench_replay_tenant(:i), bench_replay_key(:i), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855') AS c \gset
END;
