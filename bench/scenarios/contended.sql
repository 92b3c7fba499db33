-- contended (16 clients): half the requests are duplicates of a key that is in flight or done.
-- Each request takes v = nextval('bench_pair_seq'). An even v asks for the new key v/2; an odd v
-- repeats the key of an even request 0..31 requests earlier, so with 16 clients about half of
-- the repeats meet a key still in flight and half a key already completed (and now and then
-- the repeat gets there first). Only the request that gets 'claimed' runs the business INSERT
-- and idem_complete; the others skip both (a real API would replay the stored response or
-- answer 409). The outcome is tallied in bench_outcome_* within the claim statement itself.
\set amount random(100, 99999)
\set lag random(0, 31)
BEGIN;
SELECT s.tenant, s.k AS key, c.fence, (c.outcome = 'claimed')::int AS claimed,
       CASE c.outcome WHEN 'claimed' THEN nextval('bench_outcome_claimed')
                      WHEN 'completed' THEN nextval('bench_outcome_completed')
                      WHEN 'in_progress' THEN nextval('bench_outcome_in_progress')
                      ELSE nextval('bench_outcome_other') END AS tally
  FROM (SELECT 't' || (p.pair % 100 + 1) AS tenant, md5(:run::text || '/' || p.pair)::uuid::text AS k
          FROM (SELECT CASE WHEN q.v % 2 = 0 THEN q.v / 2 ELSE greatest(0, (q.v - 1) / 2 - :lag::int) END AS pair
                  FROM (SELECT nextval('bench_pair_seq') AS v) AS q) AS p) AS s,
       LATERAL idem_claim(s.tenant, s.k, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855') AS c \gset
\if :claimed
INSERT INTO payments (tenant, idem_key, amount_cents, currency)
VALUES (:tenant, :key, :amount, 'EUR')
RETURNING id AS payment_id \gset
SELECT idem_complete(:tenant, :key, :fence, 201,
       jsonb_build_object('payment_id', :payment_id::bigint, 'status', 'succeeded', 'amount_cents', :amount::bigint));
\endif
END;
