//! Whether a fenced call (complete, fail, release, heartbeat, checkpoint, assert_fence) holds
//! the key with its fence.

use crate::row::State;

/// Why a fence no longer holds its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaleBecause {
    Completed,
    Failed,
    /// another attempt holds the key now (a takeover, or a claim after a release)
    NotHolder,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FencedDecision {
    /// The row is an attempt in progress that was handed this very fence.
    Holds,
    /// No such key (P0002).
    NotFound,
    /// A stale fence (55000).
    Stale(StaleBecause),
}

/// Whether `row`, the key's fence and state as the caller's transaction sees them, is held by
/// `fence`.
pub fn decide_fenced(row: Option<(i64, State)>, fence: i64) -> FencedDecision {
    match row {
        None => FencedDecision::NotFound,
        Some((held, State::InProgress)) if held == fence => FencedDecision::Holds,
        Some((_, State::Completed)) => FencedDecision::Stale(StaleBecause::Completed),
        Some((_, State::Failed)) => FencedDecision::Stale(StaleBecause::Failed),
        Some((_, State::InProgress)) => FencedDecision::Stale(StaleBecause::NotHolder),
    }
}
