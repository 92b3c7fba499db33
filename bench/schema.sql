-- Schemas of the pg_idem benchmark (bench/run.py loads this file into a throwaway server).
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

-- Scenario `contended`: every value of bench_pair_seq / 2 names one key, so each key is asked
-- for twice by two requests that arrive back to back (usually from two different clients).
CREATE SEQUENCE bench_pair_seq;

-- Outcome tallies of the `contended` scenario (nextval is not rolled back, costs no round trip).
CREATE SEQUENCE bench_outcome_claimed;
CREATE SEQUENCE bench_outcome_completed;
CREATE SEQUENCE bench_outcome_in_progress;
CREATE SEQUENCE bench_outcome_other;
