//! Operations under a fence (complete, fail, release, heartbeat, checkpoint, assert_fence):
//! whether the caller's fence holds the key (`Fenced::check`), and what the operation does to
//! the row that holds it (`FencedChange::effect`).

use pg_idem_rules::{decide_fenced, FencedDecision, StaleBecause};

use crate::errors::{self, LeaseLost};
use crate::pg::datum::Jsonb;
use crate::pg::time::Micros;
use crate::rules::key_row::{after, KeyRow, State};
use crate::rules::row_write::{Column, RowWrite, Value};

/// The key a fenced operation addresses.
pub struct Fenced<'a> {
    pub function: &'static str,
    pub tenant: &'a str,
    pub key: &'a str,
    pub fence: i64,
}

impl Fenced<'_> {
    /// Whether `row`, the key as the caller's transaction sees it, is held by this fence: an
    /// attempt in progress that was handed this very fence. Otherwise why not: no such key
    /// (P0002), or a stale fence (55000, saying what became of the key).
    pub fn check(&self, row: Option<&KeyRow<'_>>) -> Result<(), Refused> {
        let why = match decide_fenced(row.map(|row| (row.fence, row.state)), self.fence) {
            FencedDecision::Holds => return Ok(()),
            FencedDecision::NotFound => {
                return Err(Refused {
                    error: errors::key_not_found(self.function, self.tenant, self.key, self.fence),
                    stale_fence: false,
                })
            }
            FencedDecision::Stale(StaleBecause::Completed) => LeaseLost::Completed,
            FencedDecision::Stale(StaleBecause::Failed) => LeaseLost::Failed,
            FencedDecision::Stale(StaleBecause::NotHolder) => LeaseLost::NotHolder,
        };
        Err(Refused {
            error: errors::lease_lost(self.function, self.tenant, self.key, self.fence, why),
            stale_fence: true,
        })
    }
}

/// A fenced operation the key's current state refuses: the error to raise, and whether it was a
/// stale fence (55000) rather than a missing key (P0002), which the caller counts.
pub struct Refused {
    pub error: errors::IdemError,
    pub stale_fence: bool,
}

/// The change a fenced operation makes to the row holding the fence.
pub enum FencedChange<'a> {
    /// Stores the final outcome (completed or failed).
    Finish {
        state: State,
        response_code: Option<i32>,
        response_body: Option<Jsonb<'a>>,
        now: Micros,
    },
    /// Extends the lease to `lease_us` from now.
    Heartbeat { lease_us: i64, now: Micros },
    /// Records the attempt's progress.
    Checkpoint {
        phase: &'a str,
        data: Option<Jsonb<'a>>,
        now: Micros,
    },
    /// Removes the claim.
    Release,
    /// Locks the row until the end of the transaction.
    AssertFence,
}

/// What a fenced operation does to the row holding the fence. One lives on the stack for the
/// length of a call, so the size of `Update` costs nothing that boxing it would not cost more.
#[allow(clippy::large_enum_variant)]
pub enum Effect<'a> {
    Update(RowWrite<'a>),
    Delete,
    /// Locks the row (FOR NO KEY UPDATE) and changes nothing.
    Lock,
}

/// The row's times after a fenced operation, which the operation answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FencedTimes {
    pub expires_at: Micros,
    pub lease_expires_at: Option<Micros>,
}

impl<'a> FencedChange<'a> {
    /// What the change does to `row` (which holds the fence), and the row's times after it: a
    /// final outcome is replayed for ttl from now and clears the lease and the checkpoint; a
    /// sign of life (heartbeat, checkpoint) keeps the key for its ttl from now on and never
    /// less than its lease.
    pub fn effect(&self, row: &KeyRow<'_>) -> (Effect<'a>, FencedTimes) {
        let kept = FencedTimes {
            expires_at: row.expires_at,
            lease_expires_at: row.lease_expires_at,
        };
        match *self {
            FencedChange::Finish {
                state,
                response_code,
                response_body,
                now,
            } => {
                let expires_at = after(now, row.ttl());
                let write = RowWrite::new()
                    .set(Column::State, Value::State(state))
                    .set(
                        Column::ResponseCode,
                        response_code.map_or(Value::Null, Value::Int4),
                    )
                    .set(Column::ResponseBody, response_body.into())
                    .set(Column::LeaseExpiresAt, Value::Null)
                    .set(Column::ExpiresAt, Value::Time(expires_at))
                    .set(Column::CheckpointPhase, Value::Null)
                    .set(Column::CheckpointData, Value::Null);
                (
                    Effect::Update(write),
                    FencedTimes {
                        expires_at,
                        lease_expires_at: None,
                    },
                )
            }
            FencedChange::Heartbeat { lease_us, now } => {
                let lease_expires_at = after(now, lease_us);
                let expires_at = row
                    .expires_at
                    .max(lease_expires_at)
                    .max(after(now, row.ttl()));
                let write = RowWrite::new()
                    .set(Column::LeaseExpiresAt, Value::Time(lease_expires_at))
                    .set(Column::ExpiresAt, Value::Time(expires_at));
                (
                    Effect::Update(write),
                    FencedTimes {
                        expires_at,
                        lease_expires_at: Some(lease_expires_at),
                    },
                )
            }
            FencedChange::Checkpoint { phase, data, now } => {
                let expires_at = row.expires_at.max(after(now, row.ttl()));
                let write = RowWrite::new()
                    .set(Column::CheckpointPhase, Value::Text(phase))
                    .set(Column::CheckpointData, data.into())
                    .set(Column::ExpiresAt, Value::Time(expires_at));
                (Effect::Update(write), FencedTimes { expires_at, ..kept })
            }
            FencedChange::Release => (Effect::Delete, kept),
            FencedChange::AssertFence => (Effect::Lock, kept),
        }
    }

    /// The statement the executor would run for it, as PreventCommandIfReadOnly names it.
    pub fn command(&self) -> &'static std::ffi::CStr {
        match self {
            FencedChange::Release => c"DELETE",
            FencedChange::AssertFence => c"SELECT FOR NO KEY UPDATE",
            _ => c"UPDATE",
        }
    }
}
