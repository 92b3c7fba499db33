//! Consumed messages (idem_consume): what a consume answers for the key's row
//! (`plan_consume`), and the row it writes for a new message (`ConsumeRequest::write`).

use crate::errors;
use crate::pg::time::{timestamptz, Micros};
use pg_idem_rules::{decide_consume, ConsumeDecision};

use crate::rules::key_row::{after, message_request_hash, Attempt, KeyRow, MessageRows, State};
use crate::rules::row_write::{Column, RowWrite, Value};

pub struct ConsumeRequest<'a> {
    /// the SQL function that consumes (idem_consume, idem_consume_many), named by its errors
    pub function: &'static str,
    pub tenant: &'a str,
    pub key: &'a str,
    pub ttl_us: i64,
}

impl ConsumeRequest<'_> {
    /// The row of a message consumed now: completed, kept for its ttl, no lease, no response,
    /// no checkpoint, and no fence of its own (a later claim's fence is drawn above every
    /// earlier one anyway). `Narrow`: only what a message has (`key_row::MessageRows`), its
    /// expiry in purge_after; `Whole`: every column, for a table not updated to 0.5.0 yet.
    /// `fence` is the one of the row it replaces, 0 for a new row.
    pub fn write(
        &self,
        now: Micros,
        fence: i64,
        attempt: Attempt,
        rows: MessageRows,
    ) -> RowWrite<'_> {
        let expires_at = after(now, self.ttl_us);
        let common = RowWrite::new()
            .set(Column::State, Value::State(State::Completed))
            .set(Column::LeaseExpiresAt, Value::Null)
            .set(Column::ResponseCode, Value::Null)
            .set(Column::ResponseBody, Value::Null)
            .set(Column::CheckpointPhase, Value::Null)
            .set(Column::CheckpointData, Value::Null);
        match rows {
            MessageRows::Narrow => common
                .set(Column::ExpiresAt, Value::Null)
                // the expiry itself, not at most it: nothing moves it again, and the purge
                // finds the row by it
                .set(Column::PurgeAfter, Value::Time(expires_at))
                .set(Column::Fence, Value::Null)
                .set(
                    Column::Attempt,
                    if attempt == Attempt::FIRST {
                        Value::Null
                    } else {
                        Value::Int4(attempt.number)
                    },
                )
                .set(Column::RequestHash, Value::Null)
                .set(Column::ClaimedAt, Value::Null)
                .set(Column::Ttl, Value::Null),
            MessageRows::Whole => common
                .set(Column::ExpiresAt, Value::Time(expires_at))
                .lower(Column::PurgeAfter, expires_at)
                .set(Column::Fence, Value::Int8(fence))
                .set(Column::Attempt, Value::Int4(attempt.number))
                .set(Column::RequestHash, Value::Hash(message_request_hash()))
                .set(Column::ClaimedAt, Value::Time(now))
                .set(Column::Ttl, Value::Duration(self.ttl_us)),
        }
    }
}

/// What idem_consume found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consumed {
    /// The message is new: it is recorded as processed in the caller's transaction.
    New {
        /// it took over an attempt of idem_claim whose lease had passed
        takeover: bool,
    },
    /// It was processed already (a committed consume, or a key completed or failed).
    Duplicate,
}

/// What a consume has to do about the key's committed row (no other transaction is writing
/// it: a consume waits for such a transaction first, as INSERT ... ON CONFLICT does).
pub enum ConsumePlan {
    Answer(Consumed),
    /// An attempt in progress holds the key: the error to raise.
    Held(errors::IdemError),
    /// Record it as processed with this attempt: afresh (the first), in place of an expired
    /// row, or taking over an attempt of idem_claim whose lease passed (the next).
    Write(Attempt),
}

/// The rule of idem_consume for `row`, the key's latest committed version (or this
/// transaction's own): `pg_idem_rules::decide_consume`'s decision, with the error an attempt
/// in progress raises (55P03: the message must not be acknowledged, it will be redelivered).
pub fn plan_consume(
    row: Option<&KeyRow<'_>>,
    mine: bool,
    request: &ConsumeRequest<'_>,
    now: Micros,
) -> ConsumePlan {
    match decide_consume(row.map(|row| row.seen(true)).as_ref(), mine, now) {
        ConsumeDecision::Write(attempt) => ConsumePlan::Write(attempt),
        ConsumeDecision::Duplicate => ConsumePlan::Answer(Consumed::Duplicate),
        ConsumeDecision::Held { mine } => ConsumePlan::Held(errors::consume_in_progress(
            request.function,
            request.tenant,
            request.key,
            row.and_then(|row| row.lease_expires_at).map(timestamptz),
            mine,
        )),
    }
}
