//! Statistics: cumulative counters since server start, and the keys by state, for
//! sql/stats.sql's functions. In layers, each using only those above it:
//!
//! - `counters`: the counters in shared memory (with the preload; without it recording is a
//!   no-op), what they count (`Event`), recording and reading them; no SQL
//! - `counts`: the counters as SQL shows them, one named field per column, NULL without the
//!   preload (`Counts`), and this server's totals
//! - `cluster`: a node's keys by state and counters, and on a Citus coordinator their sum over
//!   the nodes that answer (a single server is a cluster of one)
//! - `functions`: the SQL functions, shaping the above into their rows

mod cluster;
mod counters;
mod counts;
mod functions;

pub use counters::{init_shared_memory, record, record_purged, Event, Tally};
