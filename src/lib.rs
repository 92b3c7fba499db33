//! pg_idem: exactly-once effects on top of at-least-once delivery, as a PostgreSQL extension.
//!
//! This file only wires the modules together. They form layers; each uses only those below it:
//!
//! - SQL functions, one module per `sql/*.sql` file (each declares the functions of its module):
//!   `api` (sql/api.sql: claim, complete, fail, release, heartbeat, forget, purge, hashes),
//!   `extras` (sql/extras.sql: batch claims, checkpoints, fence guard, downstream keys),
//!   `streams` (sql/streams.sql: stream watermarks), `tenants` (sql/tenants.sql: tenants as an
//!   access boundary), `stats` (sql/stats.sql: counters and statistics), `worker`
//!   (sql/worker.sql: the purge launcher and workers, and their status); sql/cluster.sql has
//!   only PL/pgSQL (distributing with Citus, every node's counters)
//! - `args`: argument checks shared by the SQL functions
//! - `store`: the key store, every read and write of idem.keys, and what idem.keys must be for
//!   pg_idem to touch it (`store::definition`); no policy (statistics are recorded by its
//!   callers). `store::engine` writes through `heap` (the default); the SPI path
//!   in `store` runs the same rules through prepared statements where the engine cannot (Citus,
//!   a hot standby, an idem.keys it cannot write exactly as the executor would)
//! - bottom, no policy: `cluster` (Citus: whether it is installed and distributes idem.keys,
//!   and what a coordinator asks of the worker nodes), `heap` (rows through the table and index access methods), `pg_version`
//!   (the access-method calls that differ between PostgreSQL versions), `jsonb_walk` (a canonical walk of jsonb), `canonical_json`, `hashing`,
//!   `datum` (jsonb pass-through, one-row records), `time`, `guc` (the settings), `preload`
//!   (whether shared memory exists), `errors` (SQLSTATEs, messages, details, hints),
//!   `enum_list`
//!
//! sql/schema.sql creates the tables; `sql/pg_idem--A--B.sql` are the upgrade scripts.

use pgrx::prelude::*;

mod enum_list;
mod errors;
mod hashing;
mod pg;
mod rules;
mod sql_api;
mod stats;
mod store;
mod worker;

use pg::{guc, preload};

pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!("../sql/api.sql", name = "api", requires = ["schema"]);
extension_sql_file!("../sql/extras.sql", name = "extras", requires = ["api"]);
extension_sql_file!(
    "../sql/streams.sql",
    name = "streams",
    requires = ["extras"]
);
extension_sql_file!("../sql/worker.sql", name = "worker", requires = ["streams"]);
extension_sql_file!("../sql/stats.sql", name = "stats", requires = ["worker"]);
extension_sql_file!("../sql/tenants.sql", name = "tenants", requires = ["stats"]);
extension_sql_file!(
    "../sql/cluster.sql",
    name = "cluster",
    requires = ["tenants"]
);
extension_sql_file!(
    "../sql/consumers.sql",
    name = "consumers",
    requires = ["cluster"]
);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::init();
    // SAFETY: a flag the postmaster sets while it loads shared_preload_libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        stats::init_shared_memory();
        store::fences::init_shared_memory();
        worker::register();
        preload::mark();
    }
}

#[cfg(any(test, feature = "pg_test"))]
mod testing;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_idem'"]
    }
}
