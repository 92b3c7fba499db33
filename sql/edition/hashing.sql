-- pg_idem SQL edition: hashing.
--
-- The fingerprints, lock identities and UUIDs of the native extension, re-implemented in SQL and
-- PL/pgSQL only (no C, no pgcrypto), byte for byte equal to src/hashing/ of the Rust extension.
-- tests/sql_edition_hashing.rs compares every function here with the native one.
--
-- Every function and operator is qualified with pg_catalog (types too), and no literal holds a
-- backslash that standard_conforming_strings could reinterpret: these bodies are parsed when they
-- first run, under the caller's search_path and settings, so nothing a caller sets may change
-- what they compute.
--
-- Text is hashed as its bytes in the database encoding, as native does (it reads jsonb strings
-- straight from the container and text arguments as they are): in a UTF8 database, which every
-- managed service uses, those are the UTF-8 bytes. The bytes are taken with
-- decode(replace(t, '\', '\\'), 'escape'), which is IMMUTABLE (convert_to is only STABLE), so
-- the small SQL functions below stay inlinable into their callers.

-- SHA-1 (FIPS 180-4), which core PostgreSQL lacks and UUIDv5 needs (idem.downstream_key).
-- 32-bit words are bigint values in [0, 2^32), masked after every addition and left shift.
-- Not for security: only to name downstream calls the same way the uuid crate does.
CREATE FUNCTION idem.sha1(data bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$
DECLARE
    m CONSTANT pg_catalog.int8 := 4294967295;
    h0 pg_catalog.int8 := 1732584193;   -- 0x67452301
    h1 pg_catalog.int8 := 4023233417;   -- 0xefcdab89
    h2 pg_catalog.int8 := 2562383102;   -- 0x98badcfe
    h3 pg_catalog.int8 := 271733878;    -- 0x10325476
    h4 pg_catalog.int8 := 3285377520;   -- 0xc3d2e1f0
    a pg_catalog.int8;
    b pg_catalog.int8;
    c pg_catalog.int8;
    d pg_catalog.int8;
    e pg_catalog.int8;
    t pg_catalog.int8;
    w pg_catalog.int8[];
    msg pg_catalog.bytea;
    len pg_catalog.int8 := pg_catalog.length(data);
    blocks pg_catalog.int4;
    p pg_catalog.int4;
BEGIN
    -- padding: 0x80, zeros up to 56 bytes mod 64, then the bit length as a 64-bit big-endian
    msg := data OPERATOR(pg_catalog.||) pg_catalog.decode('80', 'hex')
        OPERATOR(pg_catalog.||) pg_catalog.decode(pg_catalog.repeat('00',
               ((119 OPERATOR(pg_catalog.-) (len OPERATOR(pg_catalog.%) 64)) OPERATOR(pg_catalog.%) 64)::pg_catalog.int4), 'hex')
        OPERATOR(pg_catalog.||) pg_catalog.int8send(len OPERATOR(pg_catalog.*) 8);
    blocks := pg_catalog.length(msg) OPERATOR(pg_catalog./) 64;
    w := pg_catalog.array_fill(0::pg_catalog.int8, ARRAY[80], ARRAY[0]);
    FOR blk IN 0 .. blocks OPERATOR(pg_catalog.-) 1 LOOP
        FOR i IN 0 .. 15 LOOP
            -- OPERATOR(...) has one precedence for all: every product is parenthesised
            p := (blk OPERATOR(pg_catalog.*) 64) OPERATOR(pg_catalog.+) (i OPERATOR(pg_catalog.*) 4);
            w[i] := (pg_catalog.get_byte(msg, p)::pg_catalog.int8 OPERATOR(pg_catalog.<<) 24)
                OPERATOR(pg_catalog.|) (pg_catalog.get_byte(msg, p OPERATOR(pg_catalog.+) 1) OPERATOR(pg_catalog.<<) 16)
                OPERATOR(pg_catalog.|) (pg_catalog.get_byte(msg, p OPERATOR(pg_catalog.+) 2) OPERATOR(pg_catalog.<<) 8)
                OPERATOR(pg_catalog.|) pg_catalog.get_byte(msg, p OPERATOR(pg_catalog.+) 3);
        END LOOP;
        FOR i IN 16 .. 79 LOOP
            t := w[i OPERATOR(pg_catalog.-) 3] OPERATOR(pg_catalog.#) w[i OPERATOR(pg_catalog.-) 8]
                OPERATOR(pg_catalog.#) w[i OPERATOR(pg_catalog.-) 14] OPERATOR(pg_catalog.#) w[i OPERATOR(pg_catalog.-) 16];
            w[i] := ((t OPERATOR(pg_catalog.<<) 1) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (t OPERATOR(pg_catalog.>>) 31);
        END LOOP;
        a := h0; b := h1; c := h2; d := h3; e := h4;
        -- 80 rounds, unrolled five at a time so that the five words never move: round r
        -- adds rotl5(A) + f(B, C, D) + K + w[r] into E (which becomes the new A) and rotates
        -- B by 30; the roles (A, B, C, D, E) then shift by one: (E, A, B, C, D).
        -- rounds 0 to 19: k = 0x5a827999
        FOR i IN 0 .. 15 BY 5 LOOP
            e := (e OPERATOR(pg_catalog.+) (((a OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (a OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) ((b OPERATOR(pg_catalog.&) c) OPERATOR(pg_catalog.|) ((OPERATOR(pg_catalog.~) b) OPERATOR(pg_catalog.&) d))
                  OPERATOR(pg_catalog.+) 1518500249 OPERATOR(pg_catalog.+) w[i]) OPERATOR(pg_catalog.&) m;
            b := (((b OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (b OPERATOR(pg_catalog.>>) 2));
            d := (d OPERATOR(pg_catalog.+) (((e OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (e OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) ((a OPERATOR(pg_catalog.&) b) OPERATOR(pg_catalog.|) ((OPERATOR(pg_catalog.~) a) OPERATOR(pg_catalog.&) c))
                  OPERATOR(pg_catalog.+) 1518500249 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 1]) OPERATOR(pg_catalog.&) m;
            a := (((a OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (a OPERATOR(pg_catalog.>>) 2));
            c := (c OPERATOR(pg_catalog.+) (((d OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (d OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) ((e OPERATOR(pg_catalog.&) a) OPERATOR(pg_catalog.|) ((OPERATOR(pg_catalog.~) e) OPERATOR(pg_catalog.&) b))
                  OPERATOR(pg_catalog.+) 1518500249 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 2]) OPERATOR(pg_catalog.&) m;
            e := (((e OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (e OPERATOR(pg_catalog.>>) 2));
            b := (b OPERATOR(pg_catalog.+) (((c OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (c OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) ((d OPERATOR(pg_catalog.&) e) OPERATOR(pg_catalog.|) ((OPERATOR(pg_catalog.~) d) OPERATOR(pg_catalog.&) a))
                  OPERATOR(pg_catalog.+) 1518500249 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 3]) OPERATOR(pg_catalog.&) m;
            d := (((d OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (d OPERATOR(pg_catalog.>>) 2));
            a := (a OPERATOR(pg_catalog.+) (((b OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (b OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) ((c OPERATOR(pg_catalog.&) d) OPERATOR(pg_catalog.|) ((OPERATOR(pg_catalog.~) c) OPERATOR(pg_catalog.&) e))
                  OPERATOR(pg_catalog.+) 1518500249 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 4]) OPERATOR(pg_catalog.&) m;
            c := (((c OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (c OPERATOR(pg_catalog.>>) 2));
        END LOOP;
        -- rounds 20 to 39: k = 0x6ed9eba1
        FOR i IN 20 .. 35 BY 5 LOOP
            e := (e OPERATOR(pg_catalog.+) (((a OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (a OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) (b OPERATOR(pg_catalog.#) c OPERATOR(pg_catalog.#) d)
                  OPERATOR(pg_catalog.+) 1859775393 OPERATOR(pg_catalog.+) w[i]) OPERATOR(pg_catalog.&) m;
            b := (((b OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (b OPERATOR(pg_catalog.>>) 2));
            d := (d OPERATOR(pg_catalog.+) (((e OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (e OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) (a OPERATOR(pg_catalog.#) b OPERATOR(pg_catalog.#) c)
                  OPERATOR(pg_catalog.+) 1859775393 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 1]) OPERATOR(pg_catalog.&) m;
            a := (((a OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (a OPERATOR(pg_catalog.>>) 2));
            c := (c OPERATOR(pg_catalog.+) (((d OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (d OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) (e OPERATOR(pg_catalog.#) a OPERATOR(pg_catalog.#) b)
                  OPERATOR(pg_catalog.+) 1859775393 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 2]) OPERATOR(pg_catalog.&) m;
            e := (((e OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (e OPERATOR(pg_catalog.>>) 2));
            b := (b OPERATOR(pg_catalog.+) (((c OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (c OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) (d OPERATOR(pg_catalog.#) e OPERATOR(pg_catalog.#) a)
                  OPERATOR(pg_catalog.+) 1859775393 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 3]) OPERATOR(pg_catalog.&) m;
            d := (((d OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (d OPERATOR(pg_catalog.>>) 2));
            a := (a OPERATOR(pg_catalog.+) (((b OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (b OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) (c OPERATOR(pg_catalog.#) d OPERATOR(pg_catalog.#) e)
                  OPERATOR(pg_catalog.+) 1859775393 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 4]) OPERATOR(pg_catalog.&) m;
            c := (((c OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (c OPERATOR(pg_catalog.>>) 2));
        END LOOP;
        -- rounds 40 to 59: k = 0x8f1bbcdc
        FOR i IN 40 .. 55 BY 5 LOOP
            e := (e OPERATOR(pg_catalog.+) (((a OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (a OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) ((b OPERATOR(pg_catalog.&) c) OPERATOR(pg_catalog.|) (b OPERATOR(pg_catalog.&) d) OPERATOR(pg_catalog.|) (c OPERATOR(pg_catalog.&) d))
                  OPERATOR(pg_catalog.+) 2400959708 OPERATOR(pg_catalog.+) w[i]) OPERATOR(pg_catalog.&) m;
            b := (((b OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (b OPERATOR(pg_catalog.>>) 2));
            d := (d OPERATOR(pg_catalog.+) (((e OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (e OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) ((a OPERATOR(pg_catalog.&) b) OPERATOR(pg_catalog.|) (a OPERATOR(pg_catalog.&) c) OPERATOR(pg_catalog.|) (b OPERATOR(pg_catalog.&) c))
                  OPERATOR(pg_catalog.+) 2400959708 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 1]) OPERATOR(pg_catalog.&) m;
            a := (((a OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (a OPERATOR(pg_catalog.>>) 2));
            c := (c OPERATOR(pg_catalog.+) (((d OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (d OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) ((e OPERATOR(pg_catalog.&) a) OPERATOR(pg_catalog.|) (e OPERATOR(pg_catalog.&) b) OPERATOR(pg_catalog.|) (a OPERATOR(pg_catalog.&) b))
                  OPERATOR(pg_catalog.+) 2400959708 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 2]) OPERATOR(pg_catalog.&) m;
            e := (((e OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (e OPERATOR(pg_catalog.>>) 2));
            b := (b OPERATOR(pg_catalog.+) (((c OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (c OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) ((d OPERATOR(pg_catalog.&) e) OPERATOR(pg_catalog.|) (d OPERATOR(pg_catalog.&) a) OPERATOR(pg_catalog.|) (e OPERATOR(pg_catalog.&) a))
                  OPERATOR(pg_catalog.+) 2400959708 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 3]) OPERATOR(pg_catalog.&) m;
            d := (((d OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (d OPERATOR(pg_catalog.>>) 2));
            a := (a OPERATOR(pg_catalog.+) (((b OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (b OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) ((c OPERATOR(pg_catalog.&) d) OPERATOR(pg_catalog.|) (c OPERATOR(pg_catalog.&) e) OPERATOR(pg_catalog.|) (d OPERATOR(pg_catalog.&) e))
                  OPERATOR(pg_catalog.+) 2400959708 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 4]) OPERATOR(pg_catalog.&) m;
            c := (((c OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (c OPERATOR(pg_catalog.>>) 2));
        END LOOP;
        -- rounds 60 to 79: k = 0xca62c1d6
        FOR i IN 60 .. 75 BY 5 LOOP
            e := (e OPERATOR(pg_catalog.+) (((a OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (a OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) (b OPERATOR(pg_catalog.#) c OPERATOR(pg_catalog.#) d)
                  OPERATOR(pg_catalog.+) 3395469782 OPERATOR(pg_catalog.+) w[i]) OPERATOR(pg_catalog.&) m;
            b := (((b OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (b OPERATOR(pg_catalog.>>) 2));
            d := (d OPERATOR(pg_catalog.+) (((e OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (e OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) (a OPERATOR(pg_catalog.#) b OPERATOR(pg_catalog.#) c)
                  OPERATOR(pg_catalog.+) 3395469782 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 1]) OPERATOR(pg_catalog.&) m;
            a := (((a OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (a OPERATOR(pg_catalog.>>) 2));
            c := (c OPERATOR(pg_catalog.+) (((d OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (d OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) (e OPERATOR(pg_catalog.#) a OPERATOR(pg_catalog.#) b)
                  OPERATOR(pg_catalog.+) 3395469782 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 2]) OPERATOR(pg_catalog.&) m;
            e := (((e OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (e OPERATOR(pg_catalog.>>) 2));
            b := (b OPERATOR(pg_catalog.+) (((c OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (c OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) (d OPERATOR(pg_catalog.#) e OPERATOR(pg_catalog.#) a)
                  OPERATOR(pg_catalog.+) 3395469782 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 3]) OPERATOR(pg_catalog.&) m;
            d := (((d OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (d OPERATOR(pg_catalog.>>) 2));
            a := (a OPERATOR(pg_catalog.+) (((b OPERATOR(pg_catalog.<<) 5) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (b OPERATOR(pg_catalog.>>) 27)) OPERATOR(pg_catalog.+) (c OPERATOR(pg_catalog.#) d OPERATOR(pg_catalog.#) e)
                  OPERATOR(pg_catalog.+) 3395469782 OPERATOR(pg_catalog.+) w[i OPERATOR(pg_catalog.+) 4]) OPERATOR(pg_catalog.&) m;
            c := (((c OPERATOR(pg_catalog.<<) 30) OPERATOR(pg_catalog.&) m) OPERATOR(pg_catalog.|) (c OPERATOR(pg_catalog.>>) 2));
        END LOOP;
        h0 := (h0 OPERATOR(pg_catalog.+) a) OPERATOR(pg_catalog.&) m;
        h1 := (h1 OPERATOR(pg_catalog.+) b) OPERATOR(pg_catalog.&) m;
        h2 := (h2 OPERATOR(pg_catalog.+) c) OPERATOR(pg_catalog.&) m;
        h3 := (h3 OPERATOR(pg_catalog.+) d) OPERATOR(pg_catalog.&) m;
        h4 := (h4 OPERATOR(pg_catalog.+) e) OPERATOR(pg_catalog.&) m;
    END LOOP;
    RETURN pg_catalog.substr(pg_catalog.int8send(h0), 5)
        OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.int8send(h1), 5)
        OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.int8send(h2), 5)
        OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.int8send(h3), 5)
        OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.int8send(h4), 5);
END
$fn$;

-- The canonical JSON text that native idem_request_hash hashes: src/hashing/canonical_json.rs
-- (the rules) written in the order of src/hashing/jsonb_walk.rs (object members by key bytes).
-- One query per object or array, recursing only into nested containers; scalars are written in
-- place: strings, true, false and null as jsonb prints them (its escaping, escape_json, is
-- exactly the canonical one: \" \\ \b \f \n \r \t, other controls as lowercase \u00XX, the rest
-- raw), numbers as trim_scale(numeric)::text (numeric never prints an exponent or -0, and
-- trim_scale drops trailing fractional zeros and the point). Keys sort COLLATE "C", i.e. by
-- their bytes: in UTF8, code point order, as native. Arrays keep their order (ORDER BY
-- ordinality, not left to the plan). SQL NULL is JSON null, as in native idem_request_hash.
CREATE FUNCTION idem.canonical_json(value jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $fn$
DECLARE
    kind CONSTANT pg_catalog.text := pg_catalog.jsonb_typeof($1);
BEGIN
    IF kind OPERATOR(pg_catalog.=) 'object' THEN
        RETURN (
            SELECT '{' OPERATOR(pg_catalog.||) COALESCE(pg_catalog.string_agg(
                       pg_catalog.to_json(e.key)::pg_catalog.text OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||)
                       CASE WHEN pg_catalog.jsonb_typeof(e.value) OPERATOR(pg_catalog.=) 'number'
                                THEN pg_catalog.trim_scale(e.value::pg_catalog.numeric)::pg_catalog.text
                            WHEN pg_catalog.jsonb_typeof(e.value) OPERATOR(pg_catalog.=) ANY ('{object,array}'::pg_catalog.text[])
                                THEN idem.canonical_json(e.value)
                            ELSE e.value::pg_catalog.text
                       END,
                       ',' ORDER BY e.key COLLATE pg_catalog."C"), '') OPERATOR(pg_catalog.||) '}'
            FROM pg_catalog.jsonb_each($1) AS e);
    ELSIF kind OPERATOR(pg_catalog.=) 'array' THEN
        RETURN (
            SELECT '[' OPERATOR(pg_catalog.||) COALESCE(pg_catalog.string_agg(
                       CASE WHEN pg_catalog.jsonb_typeof(e.value) OPERATOR(pg_catalog.=) 'number'
                                THEN pg_catalog.trim_scale(e.value::pg_catalog.numeric)::pg_catalog.text
                            WHEN pg_catalog.jsonb_typeof(e.value) OPERATOR(pg_catalog.=) ANY ('{object,array}'::pg_catalog.text[])
                                THEN idem.canonical_json(e.value)
                            ELSE e.value::pg_catalog.text
                       END,
                       ',' ORDER BY e.n), '') OPERATOR(pg_catalog.||) ']'
            FROM pg_catalog.jsonb_array_elements($1) WITH ORDINALITY AS e(value, n));
    ELSIF kind OPERATOR(pg_catalog.=) 'number' THEN
        RETURN pg_catalog.trim_scale($1::pg_catalog.numeric)::pg_catalog.text;
    ELSIF kind IS NULL THEN
        RETURN 'null';
    ELSE
        RETURN $1::pg_catalog.text;
    END IF;
END
$fn$;

-- Native idem_request_hash(jsonb) (src/sql_api/api.rs, idem_request_hash_body): lowercase hex
-- SHA-256 of the canonical text; a SQL NULL body hashes as JSON null (the hash of 'null').
CREATE FUNCTION idem.request_hash_of_body(body jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
SELECT pg_catalog.encode(pg_catalog.sha256(pg_catalog.decode(pg_catalog.replace(
           idem.canonical_json(body), E'\\', E'\\\\'), 'escape')), 'hex')
$fn$;

-- Native idem_request_hash(text, text, jsonb) (src/sql_api/api.rs, idem_request_hash_request):
-- the canonical array [METHOD, path, body]. The method is upper-cased in ASCII only
-- (u8::to_ascii_uppercase, canonical_json.rs string_ascii_uppercase): translate, never upper(),
-- which follows the locale and Unicode (U+01C6 and U+00DF stay as they are). Method and path are
-- escaped as jsonb strings (escape_json, as in canonical_json), made with jsonb_object(text[]),
-- which is IMMUTABLE where to_json is only STABLE: so this function is inlined into its caller.
-- A SQL NULL body is JSON null; a NULL method or path gives NULL here (jsonb_object would make
-- it JSON null; native raises 22004: the caller checks the arguments first).
CREATE FUNCTION idem.request_hash_of_request(method text, path text, body jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
SELECT CASE WHEN method IS NOT NULL AND path IS NOT NULL THEN
       pg_catalog.encode(pg_catalog.sha256(pg_catalog.decode(pg_catalog.replace(
           '['
           OPERATOR(pg_catalog.||) (pg_catalog.jsonb_object(ARRAY['', pg_catalog.translate(method,
                   'abcdefghijklmnopqrstuvwxyz', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ')])
               OPERATOR(pg_catalog.->) '')::pg_catalog.text
           OPERATOR(pg_catalog.||) ','
           OPERATOR(pg_catalog.||) (pg_catalog.jsonb_object(ARRAY['', path])
               OPERATOR(pg_catalog.->) '')::pg_catalog.text
           OPERATOR(pg_catalog.||) ','
           OPERATOR(pg_catalog.||) idem.canonical_json(body)
           OPERATOR(pg_catalog.||) ']',
           E'\\', E'\\\\'), 'escape')), 'hex')
       END
$fn$;

-- Native idem_new_key() (src/hashing/mod.rs new_uuid_v7, uuid crate Uuid::now_v7): an RFC 9562
-- UUIDv7: 48-bit Unix milliseconds, version 7, 12 bits of sub-millisecond time (RFC 9562
-- 6.2 method 3, as PostgreSQL 18's uuidv7() does), then the variant and 62 random bits, taken
-- from gen_random_uuid() (core since PostgreSQL 13; its byte 8 already holds variant 10).
-- floor(epoch * 4096000) is ms * 4096 + floor((us mod 1000) * 4096 / 1000), i.e. the 48 + 12
-- bits at once; the version nibble is inserted between them as a bit string. One expression,
-- each volatile call made once: the function is inlined into its caller (2 us a call here,
-- 5 us as a SQL function with a FROM clause). Native fills those 12 bits and more with a
-- per-process counter instead, so its keys are strictly increasing within a backend; here
-- keys of one backend are ordered to the microsecond of clock_timestamp() (two calls within
-- one microsecond are ordered at random), with no state kept between calls.
CREATE FUNCTION idem.new_uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE
AS $fn$
SELECT (pg_catalog.encode(pg_catalog.int8send(pg_catalog.substring(pg_catalog.overlay(
            pg_catalog.floor(EXTRACT(EPOCH FROM pg_catalog.clock_timestamp())
                             OPERATOR(pg_catalog.*) 4096000)::pg_catalog.int8::pg_catalog.bit(64),
            B'0111', 53, 0), 5)::pg_catalog.int8), 'hex')
        OPERATOR(pg_catalog.||)
        pg_catalog.encode(pg_catalog.substr(pg_catalog.uuid_send(pg_catalog.gen_random_uuid()), 9), 'hex')
       )::pg_catalog.uuid
$fn$;

-- Native idem_downstream_key(tenant, key, step) (src/hashing/mod.rs downstream_key, uuid crate
-- Uuid::new_v5): SHA-1 of namespace 413cc45f-1345-5112-b02e-a86e23d459a6 (DOWNSTREAM_NAMESPACE)
-- then tenant, 0x00, key, 0x00, step; the first 16 bytes with version 5 and variant 10.
-- PL/pgSQL: the digest is used three times, and a SQL function holding it in a FROM clause
-- cost 120 us a call more than this one (which costs what its SHA-1 costs).
CREATE FUNCTION idem.downstream_key(tenant text, key text, step text) RETURNS uuid
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$
DECLARE
    h CONSTANT pg_catalog.bytea := pg_catalog.substr(idem.sha1(
        pg_catalog.decode('413cc45f13455112b02ea86e23d459a6', 'hex')
        OPERATOR(pg_catalog.||) pg_catalog.decode(pg_catalog.replace(tenant, E'\\', E'\\\\'), 'escape')
        OPERATOR(pg_catalog.||) pg_catalog.decode('00', 'hex')
        OPERATOR(pg_catalog.||) pg_catalog.decode(pg_catalog.replace(key, E'\\', E'\\\\'), 'escape')
        OPERATOR(pg_catalog.||) pg_catalog.decode('00', 'hex')
        OPERATOR(pg_catalog.||) pg_catalog.decode(pg_catalog.replace(step, E'\\', E'\\\\'), 'escape')),
        1, 16);
BEGIN
    RETURN pg_catalog.encode(
               pg_catalog.set_byte(pg_catalog.set_byte(h, 6,
                   (pg_catalog.get_byte(h, 6) OPERATOR(pg_catalog.&) 15) OPERATOR(pg_catalog.|) 80), 8,
                   (pg_catalog.get_byte(h, 8) OPERATOR(pg_catalog.&) 63) OPERATOR(pg_catalog.|) 128),
               'hex')::pg_catalog.uuid;
END
$fn$;

-- Native hashing::uuid_v7_unix_ms (src/hashing/mod.rs), behind the stale-key rule: the 48-bit
-- Unix milliseconds of a key that is a UUIDv7 (version nibble 7, any variant) in one of the
-- spellings uuid::Uuid::try_parse accepts (uuid 1.x, src/parser.rs), told apart as it does by
-- the length in bytes: 32, hex digits only; 36, hyphenated 8-4-4-4-12; 38, hyphenated in braces;
-- 45, 'urn:uuid:' in any ASCII case then hyphenated. Hex digits in either case; NULL for
-- anything else. Checked with translate and substr in one expression, so that the function is
-- inlined (regexes cost 10 us a call here), and never with lower() (a locale may lower-case 'I'
-- to a dotless i). A non-ASCII character is never a hex digit: it fails the translate check.
-- Not STRICT: a strict function whose body is a CASE is never inlined (NULL gives NULL anyway).
CREATE FUNCTION idem.uuid_v7_unix_ms(key text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
SELECT CASE
       WHEN pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 32 THEN
            CASE WHEN pg_catalog.translate(key, '0123456789abcdefABCDEF', '') OPERATOR(pg_catalog.=) ''
                  AND pg_catalog.substr(key, 13, 1) OPERATOR(pg_catalog.=) '7'
                 THEN ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(key, 1, 12))::pg_catalog.bit(48)::pg_catalog.int8
            END
       WHEN pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 36 THEN
            CASE WHEN pg_catalog.translate(key, '0123456789abcdefABCDEF', '') OPERATOR(pg_catalog.=) '----'
                  AND pg_catalog.substr(key, 9, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(key, 14, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(key, 19, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(key, 24, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(key, 15, 1) OPERATOR(pg_catalog.=) '7'
                 THEN ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(key, 1, 8) OPERATOR(pg_catalog.||)
                       pg_catalog.substr(key, 10, 4))::pg_catalog.bit(48)::pg_catalog.int8
            END
       WHEN pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 38
        AND pg_catalog.substr(key, 1, 1) OPERATOR(pg_catalog.=) '{'
        AND pg_catalog.substr(key, 38, 1) OPERATOR(pg_catalog.=) '}' THEN
            CASE WHEN pg_catalog.translate(pg_catalog.substr(key, 2, 36), '0123456789abcdefABCDEF', '') OPERATOR(pg_catalog.=) '----'
                  AND pg_catalog.substr(pg_catalog.substr(key, 2, 36), 9, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(pg_catalog.substr(key, 2, 36), 14, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(pg_catalog.substr(key, 2, 36), 19, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(pg_catalog.substr(key, 2, 36), 24, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(pg_catalog.substr(key, 2, 36), 15, 1) OPERATOR(pg_catalog.=) '7'
                 THEN ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.substr(key, 2, 36), 1, 8) OPERATOR(pg_catalog.||)
                       pg_catalog.substr(pg_catalog.substr(key, 2, 36), 10, 4))::pg_catalog.bit(48)::pg_catalog.int8
            END
       WHEN pg_catalog.octet_length(key) OPERATOR(pg_catalog.=) 45
        AND pg_catalog.translate(pg_catalog.substr(key, 1, 9), 'URNID', 'urnid') OPERATOR(pg_catalog.=) 'urn:uuid:' THEN
            CASE WHEN pg_catalog.translate(pg_catalog.substr(key, 10), '0123456789abcdefABCDEF', '') OPERATOR(pg_catalog.=) '----'
                  AND pg_catalog.substr(pg_catalog.substr(key, 10), 9, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(pg_catalog.substr(key, 10), 14, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(pg_catalog.substr(key, 10), 19, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(pg_catalog.substr(key, 10), 24, 1) OPERATOR(pg_catalog.=) '-'
                  AND pg_catalog.substr(pg_catalog.substr(key, 10), 15, 1) OPERATOR(pg_catalog.=) '7'
                 THEN ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.substr(key, 10), 1, 8) OPERATOR(pg_catalog.||)
                       pg_catalog.substr(pg_catalog.substr(key, 10), 10, 4))::pg_catalog.bit(48)::pg_catalog.int8
            END
       END
$fn$;

-- The secret in every key lock id: random at install, readable by pg_idem's owner only (no
-- grant). The SQL edition's key locks are in pg_advisory_lock(bigint)'s space, where any role
-- may take any id; keyed with this secret, an id cannot be computed from a tenant and a key,
-- only seen in pg_locks while a transaction holds it (the row decides then:
-- idem.key_held_elsewhere). Not moved between databases (docs/editions.md): each install has
-- its own, and a new one only changes which ids the locks have.
CREATE TABLE idem.key_lock_secret (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    secret bytea NOT NULL CHECK (pg_catalog.octet_length(secret) OPERATOR(pg_catalog.>=) 16)
);
-- gen_random_uuid: pg_strong_random, 122 random bits each
INSERT INTO idem.key_lock_secret (secret)
SELECT pg_catalog.decode(pg_catalog.replace(pg_catalog.gen_random_uuid()::pg_catalog.text
           OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid()::pg_catalog.text, '-', ''), 'hex');

-- The secret, read when a caller's expression is planned (IMMUTABLE: a call without arguments
-- is folded into the plan, which PL/pgSQL keeps for the session), not at every call. Only
-- pg_idem's owner can read the table: every caller runs inside its SECURITY DEFINER functions.
-- Refused when the row is gone: a NULL id would be a lock nobody takes, and every claim would
-- go on as if it held the key. (PL/pgSQL, whose body is resolved when it runs: raise_error is
-- created after this file.)
CREATE FUNCTION idem.key_lock_secret_of_session() RETURNS bytea
-- STRICT, so that idem.key_lock_id (STRICT) stays inlinable
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$
DECLARE
    secret bytea;
BEGIN
    SELECT s.secret INTO secret FROM idem.key_lock_secret AS s;
    IF secret IS NULL THEN
        PERFORM idem.raise_error('55000', 'pg_idem: idem.key_lock_secret holds no secret',
            'The SQL edition keys every key lock with the secret drawn into idem.key_lock_secret at install; its row was deleted.',
            'As pg_idem''s owner: INSERT INTO idem.key_lock_secret (secret) SELECT pg_catalog.decode(pg_catalog.replace(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text, ''-'', ''''), ''hex''); then reconnect.');
    END IF;
    RETURN secret;
END
$fn$;

-- A key's lock id: the first 8 bytes of SHA-256(secret, tenant, 0x00, key), big-endian, as the
-- bigint with the same 64 bits (native hashing::key_lock_id without the secret: natively the
-- locks are in a space no SQL function can reach).
CREATE FUNCTION idem.key_lock_id(tenant text, key text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$
SELECT ('x' OPERATOR(pg_catalog.||) pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(
            idem.key_lock_secret_of_session()
            OPERATOR(pg_catalog.||) pg_catalog.decode(pg_catalog.replace(tenant, E'\\', E'\\\\'), 'escape')
            OPERATOR(pg_catalog.||) pg_catalog.decode('00', 'hex')
            OPERATOR(pg_catalog.||) pg_catalog.decode(pg_catalog.replace(key, E'\\', E'\\\\'), 'escape')),
        1, 8), 'hex'))::pg_catalog.bit(64)::pg_catalog.int8
$fn$;

-- Native hashing::stored_request_hash (src/hashing/mod.rs), what idem.keys.request_hash holds:
-- the first 16 bytes (STORED_HASH_BYTES) of SHA-256 of the request_hash text.
CREATE FUNCTION idem.stored_request_hash(request_hash text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$
SELECT pg_catalog.substr(pg_catalog.sha256(pg_catalog.decode(pg_catalog.replace(
           request_hash, E'\\', E'\\\\'), 'escape')), 1, 16)
$fn$;
