-- Schemas of the pg_idem benchmark (bench/runners/run.py loads this file into a throwaway server).
-- Everything here is written the way application teams usually write it: default settings,
-- default collation, default fillfactor. Only the idem.* relations come from pg_idem itself.

CREATE EXTENSION IF NOT EXISTS pg_idem;

-- The business table every scenario writes to: one payment per request.
CREATE TABLE payments (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant       text        NOT NULL,
    idem_key     text        NOT NULL,
    amount_cents bigint      NOT NULL,
    currency     text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- The common hand-written idempotency-keys table (scenario `handrolled`).
CREATE TABLE handrolled_keys (
    tenant        text        NOT NULL,
    key           text        NOT NULL,
    request_hash  text        NOT NULL,      -- hex SHA-256 of the request
    status        text        NOT NULL,      -- 'in_progress' | 'completed'
    response_code int,
    response_body jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX handrolled_keys_expires_at_idx ON handrolled_keys (expires_at);

-- Scenarios `inbox` and `inbox_batch`: the inbox table message consumers usually write by hand
-- (one row per processed message, an index on processed_at for the clean-up job), next to
-- pg_idem's idem_consume / idem_consume_many (scenarios `consume`, `consume_batch`). The business
-- table is `payments` in every scenario.
CREATE TABLE processed_messages (
    subscriber_id varchar(255),
    message_id    varchar(255),
    processed_at  timestamp DEFAULT now(),
    PRIMARY KEY (subscriber_id, message_id)
);
CREATE INDEX processed_messages_processed_at_idx ON processed_messages (processed_at);

-- Scenario `contended`: every value of bench_pair_seq / 2 names one key, so each key is asked
-- for twice by two requests that arrive back to back (usually from two different clients).
CREATE SEQUENCE bench_pair_seq;

-- Outcome tallies of the `contended` scenario (nextval is not rolled back, costs no round trip).
CREATE SEQUENCE bench_outcome_claimed;
CREATE SEQUENCE bench_outcome_completed;
CREATE SEQUENCE bench_outcome_in_progress;
CREATE SEQUENCE bench_outcome_other;

-- Scenario `plpgsql`: the same contract as pg_idem written by hand in PL/pgSQL, the way an
-- application team would: a transaction-scoped advisory lock tried on the key, the key read,
-- inserted or taken over, and a fenced UPDATE storing the response. Same columns as idem.keys
-- (16-byte request hash, fence from a sequence, lease and expiry), default settings otherwise.
CREATE TABLE plpgsql_keys (
    tenant           text        NOT NULL,
    key              text        NOT NULL,
    request_hash     bytea       NOT NULL,
    fence            bigint      NOT NULL,
    attempt          int         NOT NULL,
    state            "char"      NOT NULL,   -- 'p' in progress, 'c' completed, 'f' failed
    lease_expires_at timestamptz,
    expires_at       timestamptz NOT NULL,
    response_code    int,
    response_body    jsonb,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX plpgsql_keys_expires_at_idx ON plpgsql_keys (expires_at);
CREATE SEQUENCE plpgsql_fence_seq;

CREATE FUNCTION plpgsql_claim(p_tenant text, p_key text, p_request text,
                              p_lease interval DEFAULT '5 minutes', p_ttl interval DEFAULT '24 hours',
                              OUT outcome text, OUT fence bigint, OUT response_code int, OUT response_body jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    h bytea := substring(sha256(convert_to(p_request, 'UTF8')) FROM 1 FOR 16);
    r plpgsql_keys;
    locked boolean := pg_try_advisory_xact_lock(hashtextextended(p_tenant || chr(1) || p_key, 0));
BEGIN
    SELECT * INTO r FROM plpgsql_keys k WHERE k.tenant = p_tenant AND k.key = p_key;
    IF FOUND AND r.expires_at >= now() THEN
        IF r.request_hash <> h THEN
            outcome := 'mismatch';
        ELSIF r.state IN ('c', 'f') THEN
            outcome := CASE r.state WHEN 'c' THEN 'completed' ELSE 'failed' END;
            response_code := r.response_code;
            response_body := r.response_body;
        ELSIF r.lease_expires_at >= now() OR NOT locked THEN
            outcome := 'in_progress';
        ELSE
            UPDATE plpgsql_keys k
               SET fence = nextval('plpgsql_fence_seq'), attempt = k.attempt + 1,
                   lease_expires_at = now() + p_lease
             WHERE k.tenant = p_tenant AND k.key = p_key
            RETURNING k.fence INTO fence;
            outcome := 'claimed';
        END IF;
        RETURN;
    END IF;
    IF NOT locked THEN
        outcome := 'in_progress';   -- another transaction is claiming it right now
        RETURN;
    END IF;
    INSERT INTO plpgsql_keys AS k (tenant, key, request_hash, fence, attempt, state, lease_expires_at, expires_at)
    VALUES (p_tenant, p_key, h, nextval('plpgsql_fence_seq'), 1, 'p', now() + p_lease, now() + p_ttl)
    ON CONFLICT (tenant, key) DO UPDATE   -- an expired key
       SET request_hash = EXCLUDED.request_hash, fence = EXCLUDED.fence, attempt = 1, state = 'p',
           lease_expires_at = EXCLUDED.lease_expires_at, expires_at = EXCLUDED.expires_at,
           response_code = NULL, response_body = NULL
    RETURNING k.fence INTO fence;
    outcome := 'claimed';
END
$$;

CREATE FUNCTION plpgsql_complete(p_tenant text, p_key text, p_fence bigint, p_code int, p_body jsonb)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE plpgsql_keys k
       SET state = 'c', response_code = p_code, response_body = p_body, lease_expires_at = NULL
     WHERE k.tenant = p_tenant AND k.key = p_key AND k.fence = p_fence AND k.state = 'p';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'lease lost on key "%"', p_key USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$$;
