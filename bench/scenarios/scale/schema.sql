-- Loaded after ../schema.sql by bench/runners/scale.py and soak.py: the UUID keys of their
-- scenarios (scale/*.sql, beside this file) and of the pre-fill, the same function on both sides.
--
-- bench_uuid(kind, seed, ts): a UUID as text (36 characters, lowercase, with hyphens), its random
-- bits taken from md5(seed):
--   kind 4: a UUIDv4 (122 random bits but for the variant's two low bits, fixed at 0: '8');
--   kind 7: a UUIDv7: the first 48 bits are ts in Unix milliseconds, then version 7 and random
--           bits, so keys minted together sort together (as idem_new_key() makes them).
-- The scripts call it with now() (the transaction's start, the same in every statement of one
-- transaction), so one transaction names one key; the pre-fill passes past timestamps. One SQL
-- expression: PostgreSQL inlines it into the calling statement.
CREATE FUNCTION bench_uuid(kind int, seed text, ts timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT ((CASE WHEN kind = 7
                  THEN lpad(to_hex((extract(epoch FROM ts) * 1000)::bigint), 12, '0') || '7'
                  ELSE substr(md5(seed), 1, 12) || '4' END)
            || substr(md5(seed), 14, 3) || '8' || substr(md5(seed), 18, 15))::uuid::text
$$;
