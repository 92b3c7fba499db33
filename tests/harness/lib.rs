//! Test servers for the client suites: each test starts its own PostgreSQL with the installed
//! pg_idem (as the `postgres` OS user when run as root), on a free port, and stops it when the
//! `Server` is dropped, panic or not. With `PG_IDEM_EDITION=sql` (or `sql-tle`) the same suites
//! run against the SQL edition instead (see [`edition`] and [`sql_install`]; [`native_only`] for
//! the tests that cannot).
//!
//! One module per concern; every item is re-exported here, so a suite writes
//! `use pg_idem_tests::*;` (or names what it uses).

mod calls;
mod checks;
mod cluster;
mod connect;
mod editions;
pub mod managed;
mod postgres_bin;
mod released;
mod replication;
mod server;
mod skips;
pub mod workload;

pub use calls::*;
pub use checks::*;
pub use cluster::*;
pub use connect::*;
pub use editions::*;
pub use postgres::{Client, GenericClient, NoTls};
pub use postgres_bin::*;
pub use released::*;
pub use server::*;
pub use skips::*;
