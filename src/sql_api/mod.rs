//! The SQL functions, one module per `sql/*.sql` file that declares them: each checks its
//! arguments (`args`), the caller's access to the tenant (`crate::tenants`), builds one request
//! for the key store and shapes one result (`calls`, shared by every function that claims or
//! acts under a fence).
//!
//! - `api`: sql/api.sql (claim, complete, fail, release, heartbeat, forget, purge, hashes)
//! - `extras`: sql/extras.sql (batch claims, checkpoints, fence guard, downstream keys)
//! - `consumers`: sql/consumers.sql (consume, consume_many, complete_many)
//! - `streams`: sql/streams.sql (stream watermarks)
//! - `tenants`: sql/tenants.sql (tenant grants; the access check itself is `crate::tenants`)

pub mod api;
pub mod args;
pub mod calls;
pub mod consumers;
pub mod extras;
pub mod streams;
pub mod tenants;
