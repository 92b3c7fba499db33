//! pg_idem's decisions, apart from PostgreSQL: what a claim, a consume and a fenced call do
//! about the key's row as they found it. No error is raised and no table is read here; the
//! extension (`src/rules/` of pg_idem) reads the row, asks these functions, and turns their
//! answers into results, SQLSTATEs and writes. So the decisions run under a plain `cargo test`
//! (tests/decisions.rs), from the same table (`decisions.json`) that the client suites run
//! against both editions through SQL (tests/behaviour/decisions.rs of pg_idem_tests).
//!
//! - `time`: the clock's unit and the one way a duration is added to it
//! - `row`: what a decision reads of a key's row (`Seen`), its state and its times
//! - `claims`, `consumes`, `fenced`: the three decisions

pub mod claims;
pub mod consumes;
pub mod fenced;
pub mod row;
pub mod time;

pub use claims::{decide_claim, ClaimDecision, CLAIM_ROUNDS};
pub use consumes::{decide_consume, ConsumeDecision};
pub use fenced::{decide_fenced, FencedDecision, StaleBecause};
pub use row::{Attempt, Seen, State};
pub use time::{after, Micros};
