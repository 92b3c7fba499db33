-- pg_idem 0.4.0 -> 0.5.0. Runs inside the transaction of ALTER EXTENSION pg_idem UPDATE: all of
-- it or none of it. Keys, fences, watermarks and grants are untouched.

-- A message recorded by idem_consume becomes a narrow row (sql/schema.sql, and MessageRows in
-- src/rules/key_row.rs): the columns it leaves NULL allow NULL now. Dropping NOT NULL changes
-- only the catalog: no row is rewritten or even read, and the ACCESS EXCLUSIVE lock is held for
-- a moment. Messages consumed before the update keep their whole rows, and are read as before;
-- until the constraints are gone the library writes whole rows too (it reads them). On a Citus
-- cluster that distributes idem.keys, Citus carries the change to every shard
-- (tests/citus.rs, the_update_on_a_cluster_narrows_message_rows_on_every_shard).
ALTER TABLE idem.keys
    ALTER COLUMN fence DROP NOT NULL,
    ALTER COLUMN claimed_at DROP NOT NULL,
    ALTER COLUMN expires_at DROP NOT NULL,
    ALTER COLUMN ttl DROP NOT NULL,
    ALTER COLUMN attempt DROP NOT NULL,
    ALTER COLUMN request_hash DROP NOT NULL;
