//! Claims: what a claim answers for the row it finds (`plan`), and the row it writes when it
//! takes the key (`ClaimRequest::write`).

use crate::hashing;
use crate::pg::datum::Jsonb;
use crate::pg::time::Micros;
pub use pg_idem_rules::CLAIM_ROUNDS;
use pg_idem_rules::{decide_claim, ClaimDecision};

use crate::rules::key_row::{after, impossible, Attempt, Checkpoint, KeyRow, State};
use crate::rules::row_write::{Column, RowWrite, Value};

pub struct ClaimRequest<'a> {
    /// the SQL function that claims (idem_claim, idem_claim_many), named by its errors
    pub function: &'static str,
    pub tenant: &'a str,
    pub key: &'a str,
    pub request_hash: [u8; hashing::STORED_HASH_BYTES],
    pub lease_us: i64,
    pub ttl_us: i64,
    pub reject_stale_uuidv7: bool,
}

/// The times of an attempt claimed now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimTimes {
    pub lease_expires_at: Micros,
    /// a key in progress never expires before its lease
    pub expires_at: Micros,
    /// the lower bound of expires_at the purge walks
    pub purge_after: Micros,
}

impl ClaimRequest<'_> {
    pub fn times(&self, now: Micros) -> ClaimTimes {
        let lease_expires_at = after(now, self.lease_us);
        let purge_after = after(now, self.ttl_us);
        ClaimTimes {
            lease_expires_at,
            expires_at: purge_after.max(lease_expires_at),
            purge_after,
        }
    }

    /// The row of `attempt`, claimed now with `fence`: in progress under a new lease, no
    /// response; a takeover hands the last checkpoint on, everything else starts without one.
    pub fn write(&self, now: Micros, fence: i64, attempt: Attempt) -> RowWrite<'_> {
        let times = self.times(now);
        let write = RowWrite::new()
            .set(Column::Fence, Value::Int8(fence))
            .set(Column::Attempt, Value::Int4(attempt.number))
            .set(Column::State, Value::State(State::InProgress))
            .set(Column::RequestHash, Value::Hash(self.request_hash))
            .set(Column::ClaimedAt, Value::Time(now))
            .set(Column::LeaseExpiresAt, Value::Time(times.lease_expires_at))
            .set(Column::ExpiresAt, Value::Time(times.expires_at))
            .lower(Column::PurgeAfter, times.purge_after)
            .set(Column::Ttl, Value::Duration(self.ttl_us))
            .set(Column::ResponseCode, Value::Null)
            .set(Column::ResponseBody, Value::Null);
        if attempt.takeover {
            write
        } else {
            write
                .set(Column::CheckpointPhase, Value::Null)
                .set(Column::CheckpointData, Value::Null)
        }
    }

    /// What a claim that took the key answers: `checkpoint` is the one `plan` handed on with
    /// the attempt (a takeover's; none otherwise), which the write kept.
    pub fn claimed<'m>(
        &self,
        now: Micros,
        fence: i64,
        attempt: Attempt,
        checkpoint: Checkpoint<'m>,
    ) -> ClaimOutcome<'m> {
        let times = self.times(now);
        ClaimOutcome::Claimed {
            fence,
            attempt: attempt.number,
            lease_expires_at: times.lease_expires_at,
            expires_at: times.expires_at,
            takeover: attempt.takeover,
            checkpoint_phase: checkpoint.0,
            checkpoint_data: checkpoint.1,
        }
    }
}

pub enum ClaimOutcome<'m> {
    /// The caller owns the key now.
    Claimed {
        fence: i64,
        attempt: i32,
        lease_expires_at: Micros,
        expires_at: Micros,
        takeover: bool,
        checkpoint_phase: Option<String>,
        checkpoint_data: Option<Jsonb<'m>>,
    },
    /// An earlier attempt stored a completion or a final error.
    Replay(KeyRow<'m>),
    /// Another attempt holds the key; the row when it is visible to the caller.
    InProgress(Option<KeyRow<'m>>),
    /// The key exists under another request hash.
    Mismatch,
    /// An absent UUIDv7 key older than its ttl (pg_idem.reject_stale_uuidv7).
    StaleKey,
}

/// What a claim has to do about the row it found.
pub enum Plan<'m> {
    Answer(ClaimOutcome<'m>),
    /// Take the key with this attempt: the first when there is no live row (in place of an
    /// expired row if there is one), the next when a committed attempt's lease has passed,
    /// which hands its checkpoint on (the row's; none for a first attempt).
    Claim(Attempt, Checkpoint<'m>),
}

/// What a claim answers for `row`, the key as the claim sees it; `mine`: the row is this
/// transaction's own attempt (it claimed the key, or proved its fence with a fenced call).
/// The decision is `pg_idem_rules::decide_claim`'s; this hands the row on with the answer.
pub fn plan<'m>(
    row: Option<KeyRow<'m>>,
    mine: bool,
    request: &ClaimRequest<'_>,
    now: Micros,
) -> Plan<'m> {
    let seen = row
        .as_ref()
        .map(|row| row.seen(row.request_hash == request.request_hash));
    let decision = decide_claim(seen.as_ref(), mine, || is_stale_uuidv7(request, now), now);
    Plan::Answer(match decision {
        ClaimDecision::Claim(attempt) => {
            let checkpoint = match row {
                Some(row) if attempt.takeover => row.checkpoint,
                _ => (None, None),
            };
            return Plan::Claim(attempt, checkpoint);
        }
        ClaimDecision::Replay => ClaimOutcome::Replay(present(row)),
        ClaimDecision::InProgress => ClaimOutcome::InProgress(Some(present(row))),
        ClaimDecision::Mismatch => ClaimOutcome::Mismatch,
        ClaimDecision::StaleKey => ClaimOutcome::StaleKey,
    })
}

/// The row a decision about a present row was made on.
fn present(row: Option<KeyRow<'_>>) -> KeyRow<'_> {
    row.unwrap_or_else(|| impossible("a decision about a row that is absent".into()))
}

fn is_stale_uuidv7(request: &ClaimRequest<'_>, now: Micros) -> bool {
    if !request.reject_stale_uuidv7 {
        return false;
    }
    match hashing::uuid_v7_unix_ms(request.key) {
        Some(unix_ms) => {
            // TimestampTz counts from 2000-01-01; Unix time from 1970-01-01
            const UNIX_TO_PG_EPOCH_MS: i64 = 946_684_800_000;
            let key_time = (unix_ms as i64 - UNIX_TO_PG_EPOCH_MS).saturating_mul(1000);
            key_time < now.saturating_sub(request.ttl_us)
        }
        None => false,
    }
}
