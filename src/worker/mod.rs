//! The purge worker: expired keys go away by themselves, with no pg_cron and no application
//! timer. With `shared_preload_libraries = 'pg_idem'` the postmaster starts one *launcher*, which
//! starts one *purge worker* per database listed in `pg_idem.database`.
//!
//! - `launcher`: registering the launcher (`register`, from `_PG_init`), and the launcher, which
//!   starts each database's purge worker and starts it again after it exits
//! - `purge`: the purge worker, which purges its database every `pg_idem.purge_interval`
//! - `process`: what both do alike as background workers: signals, waiting, reloading the
//!   settings, staying out of binary-upgrade mode
//! - `slots`: what the launcher, the workers and SQL share in shared memory, one slot per
//!   database, and the one place where a worker's state changes (`StateWriter`)
//! - `status`: `idem_purge_status()`, the slots as SQL shows them

mod launcher;
mod process;
mod purge;
mod slots;
mod status;

pub use launcher::register;
