//! pg_idem: exactly-once effects on top of at-least-once delivery, as a PostgreSQL extension.
//!
//! This file only wires the modules together. Each folder is a layer; a layer uses only the
//! layers listed after it, and layers named on one bullet sit side by side (neither uses the
//! other). scripts/check_layers.py reads this list (the layers are the names before a bullet's
//! colon) and fails on any `crate::` path that goes up or sideways:
//!
//! - `sql_api` and `worker`, side by side, the two ways in: `sql_api` holds the SQL functions,
//!   one module per `sql/*.sql` file that declares them (`api`, `extras`, `consumers`,
//!   `streams`, `tenants`), the argument checks (`args`), and what every function that claims or
//!   acts under a fence shares (`calls`: the request built once, the outcome counted and shaped
//!   once); `worker` holds the purge launcher (`launcher`) and workers (`purge`), their
//!   background-worker plumbing (`process`), their slots in shared memory and the one writer of
//!   a worker's state (`slots`), and `idem_purge_status()` (`status`; sql/worker.sql). Both
//!   record events in `stats`; the worker purges through `store`.
//! - `stats` and `tenants`, side by side, what the SQL functions use besides the store:
//!   `stats` holds counters in shared memory (`counters`), as SQL shows them (`counts`), a
//!   node's and the Citus cluster's numbers (`cluster`), and the statistics functions
//!   (`functions`; sql/stats.sql); `tenants` is tenants as an access boundary
//!   (pg_idem.tenant_grants): the access check every SQL function makes before it touches a
//!   key, its per-backend cache of answers, and the tenants a restricted role may purge
//!   (`tenants::access`). `sql_api` uses it; the store does not.
//! - `store`: the key store, every read and write of idem.keys, by one of two back-ends:
//!   `store::engine` (table and index access methods, the default) and `store::spi` (SQL through
//!   the executor: Citus, a hot standby, an idem.keys a DBA extended); `store::definition` (what
//!   idem.keys must be for either to touch it), `store::fences` (drawing fences), and the purge
//!   (`store::purge`, always SQL through SPI).
//! - `rules`: what the store does, as pure decisions both back-ends apply: what a claim, a
//!   consume and a fenced call answer for the row they find (`rules::claims`, `rules::consumes`,
//!   `rules::fenced`, each around its decision in the crate `pg_idem_rules`, rules/, which has
//!   no PostgreSQL in it and is tested by a plain `cargo test`), and what each writes, column
//!   by column (`rules::row_write`); the key's times, in Rust and in SQL (`rules::key_row`).
//! - `hashing`: request fingerprints (SHA-256 of the canonical JSON form, `canonical_json`, walked
//!   from jsonb in place, `jsonb_walk`, which reads the datum through `pg::datum`), lock
//!   identities, UUIDv7 and UUIDv5.
//! - `pg`: PostgreSQL integration, no policy: rows through the access methods (`heap`), datums
//!   and the call's memory (`datum`), SQL as the extension's owner (`sql`, `owner`), advisory
//!   locks (`locks`), every per-backend cache's invalidation (`caches`), Citus (`cluster`), the
//!   settings (`guc`), the clock and intervals (`time`), shared memory (`preload`), version
//!   differences (`pg_version`).
//! - `errors`, `enum_list` and `testing`, side by side, used by every layer: SQLSTATEs,
//!   messages, details, hints (`errors`), enums with the list of their variants (`enum_list`),
//!   and the helpers of the in-server tests (`testing`).
//!
//! sql/schema.sql creates the tables; `sql/pg_idem--A--B.sql` are the upgrade scripts. The rest
//! of the repository: docs/layout.md.

use pgrx::prelude::*;

mod enum_list;
mod errors;
mod hashing;
mod pg;
mod rules;
mod sql_api;
mod stats;
mod store;
mod tenants;
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
