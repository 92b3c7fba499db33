//! Every connection the harness opens, seeded.
//!
//! The SQL edition purges expired keys in passing at one write of eight, drawn from the
//! session's `random()` (sql/edition/rules/purge.sql, `idem.purge_in_passing_drawn`). Each
//! connection made here calls `setseed` first, so the same test draws the same purges on every
//! run: the suites run with the purge in passing on, and a failure it takes part in happens
//! again when the test is run again. (Nothing else in the suites draws from `random()`; a
//! test that decides when keys are purged switches the purge in passing off, see
//! [`crate::Server::start_as`].)

use postgres::{Client, NoTls};

/// The seed of every harness connection (any value in [-1, 1]).
pub const PURGE_IN_PASSING_SEED: f64 = 0.25;

/// `Client::connect(conninfo, NoTls)`, then `setseed(PURGE_IN_PASSING_SEED)`.
pub fn connect_seeded(conninfo: &str) -> Result<Client, postgres::Error> {
    let mut client = Client::connect(conninfo, NoTls)?;
    client.execute("SELECT pg_catalog.setseed($1)", &[&PURGE_IN_PASSING_SEED])?;
    Ok(client)
}
