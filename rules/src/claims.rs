//! What a claim does about the key's row.

use crate::row::{Attempt, Seen, State};
use crate::time::Micros;

/// How many times a claim reads the key again when a concurrent commit changed it under its
/// feet. At READ COMMITTED one more read always settles it; the bound only guards against
/// livelock. The SQL edition's loop takes its bound from here (scripts/sql_edition.py).
pub const CLAIM_ROUNDS: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Take the key with this attempt: the first when there is no live row (in place of an
    /// expired row if there is one), the next when a committed attempt's lease has passed.
    Claim(Attempt),
    /// An earlier attempt stored a completion or a final error.
    Replay,
    /// Another attempt holds the key (or this transaction's own does).
    InProgress,
    /// The key exists under another request hash.
    Mismatch,
    /// An absent UUIDv7 key older than its ttl (pg_idem.reject_stale_uuidv7).
    StaleKey,
}

/// What a claim does for `row`, the key as the claim sees it. `mine`: the row is this
/// transaction's own attempt (it claimed the key, or proved its fence with a fenced call);
/// however long that attempt has run past its lease or ttl, a takeover would make its own fence
/// stale under its feet, so it stays in progress. `stale_key` says whether the key is a UUIDv7
/// older than its ttl that the settings refuse; it is asked only when the key is absent.
pub fn decide_claim(
    row: Option<&Seen>,
    mine: bool,
    stale_key: impl FnOnce() -> bool,
    now: Micros,
) -> ClaimDecision {
    let row = match row {
        Some(row) if mine && row.state == State::InProgress && row.same_request => {
            return ClaimDecision::InProgress;
        }
        Some(row) if !row.is_expired(now) => row,
        _ if stale_key() => return ClaimDecision::StaleKey,
        _ => return ClaimDecision::Claim(Attempt::FIRST),
    };
    if !row.same_request {
        return ClaimDecision::Mismatch;
    }
    match row.state {
        State::Completed | State::Failed => ClaimDecision::Replay,
        State::InProgress if row.lease_is_live(now) => ClaimDecision::InProgress,
        State::InProgress => ClaimDecision::Claim(Attempt::after(row)),
    }
}
