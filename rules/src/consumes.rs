//! What a consume (idem_consume, each message of idem_consume_many) does about the key's row.

use crate::row::{Attempt, Seen, State};
use crate::time::Micros;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumeDecision {
    /// Record the message as processed with this attempt: afresh (the first), in place of an
    /// expired row, or taking over an attempt of idem_claim whose lease passed (the next).
    Write(Attempt),
    /// It was processed already (a committed consume, or a key completed or failed).
    Duplicate,
    /// An attempt of idem_claim in progress holds the key, this transaction's own (`mine`) or
    /// another's under a live lease: the call cannot decide and fails (55P03), so the message is
    /// not acknowledged and comes again.
    Held { mine: bool },
}

/// The rule of idem_consume for `row`, the key's latest committed version (or this
/// transaction's own): an absent or expired key is new; a completed or failed one was
/// processed; an attempt in progress under a live lease, or this transaction's own, cannot be
/// decided; one whose lease has passed is taken over, as a claim would.
pub fn decide_consume(row: Option<&Seen>, mine: bool, now: Micros) -> ConsumeDecision {
    let row = match row {
        // this transaction's own attempt stays its own however long it has run past its lease
        // or ttl (as in `decide_claim`): writing over it would make its fence stale under its
        // feet
        Some(row) if mine && row.state == State::InProgress => {
            return ConsumeDecision::Held { mine: true };
        }
        Some(row) if !row.is_expired(now) => row,
        _ => return ConsumeDecision::Write(Attempt::FIRST),
    };
    match row.state {
        State::Completed | State::Failed => ConsumeDecision::Duplicate,
        State::InProgress if mine || row.lease_is_live(now) => ConsumeDecision::Held { mine },
        State::InProgress => ConsumeDecision::Write(Attempt::after(row)),
    }
}
