//! pg_idem: exactly-once effects on top of at-least-once delivery, as a PostgreSQL extension.
//!
//! This file only wires the modules together:
//! - `api`: the core SQL functions (claim, complete, fail, release, heartbeat, forget, purge, hashes)
//! - `args`: argument checks shared by every SQL function
//! - `store`: the key store, every statement on idem.keys
//! - `streams`: high-watermark dedup of ordered streams (idem.watermarks)
//! - `hashing`, `canonical_json`, `jsonb_walk`: request fingerprints (a canonical walk of jsonb),
//!   lock identities, UUIDs
//! - `datum`: jsonb pass-through and one-row records
//! - `guc`: the pg_idem.* settings
//! - `stats`: shared-memory counters and the statistics functions
//! - `tenants`: tenants as an access boundary (pg_idem.tenant_grants)
//! - `worker`: the purge launcher and purge workers
//! - `errors`: SQLSTATEs, messages, details and hints
//! - `enum_list`: enums with the list of their variants (tables indexed by variant)

use pgrx::prelude::*;

mod api;
mod args;
mod canonical_json;
mod datum;
mod enum_list;
mod errors;
mod guc;
mod hashing;
mod jsonb_walk;
mod stats;
mod store;
mod streams;
mod tenants;
mod worker;

pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!("../sql/api.sql", name = "api", requires = ["schema"]);
extension_sql_file!("../sql/extras.sql", name = "extras", requires = ["api"]);
extension_sql_file!("../sql/stats.sql", name = "stats", requires = ["extras"]);
extension_sql_file!("../sql/tenants.sql", name = "tenants", requires = ["stats"]);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::init();
    // SAFETY: a flag the postmaster sets while it loads shared_preload_libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        stats::init_shared_memory();
        worker::register();
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    include!("../pgrx-tests/helpers.rs");
    include!("../pgrx-tests/core.rs");
    include!("../pgrx-tests/hashing.rs");
    include!("../pgrx-tests/extras.rs");
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_idem'"]
    }
}
