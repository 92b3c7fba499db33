//! The rules of the key store, as pure decisions: no PostgreSQL call, no table access. The
//! decisions themselves (claim, consume, fenced call) are the crate `pg_idem_rules` (rules/),
//! which a plain `cargo test` runs against the table rules/decisions.json; this module gives
//! them the rows the back-ends read and turns their answers into outcomes, errors and writes.
//! Each takes what a back-end read (a key's row as `KeyRow`, the clock read once per call) and
//! returns an answer and what to write, column by column (`RowWrite`); the back-ends of
//! `crate::store` (the engine and the SPI path) only find rows and apply what these return.
//!
//! - `key_row`: a key as stored, its state, expiry and lease
//! - `claims`: what a claim answers for the row it finds, and the row it writes
//! - `consumes`: the same for a consumed message (idem_consume)
//! - `fenced`: whether a call's fence holds the key, and what a finish, a heartbeat, a
//!   checkpoint, a release or a fence guard does to the row
//! - `row_write`: what a write sets, column by column
//!
//! Fences themselves (drawing a new one above every earlier one) need the fence sequence and
//! shared memory: `store::fences`.

pub mod claims;
pub mod consumes;
pub mod fenced;
pub mod key_row;
pub mod row_write;

pub use claims::{ClaimOutcome, ClaimRequest};
pub use consumes::{ConsumeRequest, Consumed};
pub use fenced::{Fenced, FencedChange, Refused};
pub use key_row::State;

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use super::claims::ClaimRequest;
    use super::consumes::ConsumeRequest;
    use super::fenced::{Effect, FencedChange};
    use super::key_row::{state_code, Attempt, KeyRow, MessageRows, State, StoredRow};
    use super::row_write::{Column, RowWrite};
    use crate::hashing;

    const NOW: i64 = 800_000_000_000_000;
    const SECOND: i64 = 1_000_000;

    fn request() -> ClaimRequest<'static> {
        ClaimRequest {
            function: "idem_claim",
            tenant: "t",
            key: "k",
            request_hash: hashing::stored_request_hash("h"),
            lease_us: 30 * SECOND,
            ttl_us: 3600 * SECOND,
            reject_stale_uuidv7: false,
        }
    }

    fn in_progress() -> KeyRow<'static> {
        KeyRow {
            fence: 7,
            state: State::InProgress,
            request_hash: hashing::stored_request_hash("h"),
            attempt: 1,
            response_code: None,
            response_body: None,
            lease_expires_at: Some(NOW + 30 * SECOND),
            expires_at: NOW + 3600 * SECOND,
            ttl_us: Some(3600 * SECOND),
            checkpoint: (Some("charged".into()), None),
        }
    }

    fn sets(write: &RowWrite<'_>) -> Vec<Column> {
        write.assignments().map(|(column, _)| column).collect()
    }

    /// A new row is written whole (the engine refuses anything less), by a first claim and by a
    /// consume alike.
    #[pg_test]
    fn first_claims_and_consumes_write_every_column() {
        assert!(request().write(NOW, 1, Attempt::FIRST).is_whole_row());
        let consume = ConsumeRequest {
            function: "idem_consume",
            tenant: "t",
            key: "k",
            ttl_us: SECOND,
        };
        for rows in [MessageRows::Narrow, MessageRows::Whole] {
            assert!(consume.write(NOW, 0, Attempt::FIRST, rows).is_whole_row());
        }
    }

    /// The columns a new row gets from `write`, as a back-end would store them.
    fn stored(write: &RowWrite<'_>) -> StoredRow<'static> {
        use super::row_write::{Assign, Value};
        let mut row = StoredRow {
            fence: None,
            state: None,
            request_hash: None,
            attempt: None,
            response_code: None,
            response_body: None,
            lease_expires_at: None,
            expires_at: None,
            purge_after: None,
            ttl: None,
            checkpoint: (None, None),
        };
        for (column, assign) in write.assignments() {
            let value = match assign {
                Assign::To(value) => value,
                Assign::AtMost(bound) => Value::Time(bound),
            };
            match (column, value) {
                (_, Value::Null) => {}
                (Column::Fence, Value::Int8(v)) => row.fence = Some(v),
                (Column::Attempt, Value::Int4(v)) => row.attempt = Some(v),
                (Column::State, Value::State(v)) => row.state = Some(state_code(v)),
                (Column::RequestHash, Value::Hash(v)) => row.request_hash = Some(v),
                (Column::ExpiresAt, Value::Time(v)) => row.expires_at = Some(v),
                (Column::PurgeAfter, Value::Time(v)) => row.purge_after = Some(v),
                (Column::Ttl, Value::Duration(v)) => row.ttl = Some(v),
                (Column::ClaimedAt, Value::Time(_)) => {}
                (column, value) => panic!("{column:?} = {value:?} in a message row"),
            }
        }
        row
    }

    /// A message stored narrow (0.5.0) reads back as the same key as one stored whole (0.4.0),
    /// but for its ttl, which nothing reads in a finished key; claims and consumes answer the
    /// same for both, before and after it expires.
    #[pg_test]
    fn a_narrow_message_row_is_the_same_key_as_a_whole_one() {
        use super::claims::{plan, ClaimOutcome, Plan};
        use super::consumes::{plan_consume, ConsumePlan, Consumed};
        let consume = ConsumeRequest {
            function: "idem_consume",
            tenant: "t",
            key: "k",
            ttl_us: 60 * SECOND,
        };
        let takeover = Attempt {
            number: 3,
            takeover: true,
        };
        for attempt in [Attempt::FIRST, takeover] {
            let narrow_write = consume.write(NOW, 0, attempt, MessageRows::Narrow);
            let narrow = stored(&narrow_write);
            assert_eq!(
                (
                    narrow.fence,
                    narrow.request_hash,
                    narrow.expires_at,
                    narrow.ttl
                ),
                (None, None, None, None),
                "a message row stores no fence, hash, expires_at or ttl"
            );
            let narrow = KeyRow::decode(narrow);
            let whole = KeyRow::decode(stored(&consume.write(NOW, 0, attempt, MessageRows::Whole)));
            assert_eq!(
                (
                    narrow.fence,
                    narrow.state,
                    narrow.request_hash,
                    narrow.attempt
                ),
                (whole.fence, whole.state, whole.request_hash, whole.attempt)
            );
            assert_eq!(narrow.attempt, attempt.number);
            assert_eq!(
                (
                    narrow.expires_at,
                    narrow.lease_expires_at,
                    narrow.response_code
                ),
                (
                    whole.expires_at,
                    whole.lease_expires_at,
                    whole.response_code
                )
            );
            assert_eq!(narrow.expires_at, NOW + 60 * SECOND);
            assert_eq!((narrow.ttl_us, whole.ttl_us), (None, Some(60 * SECOND)));
        }
        let read = |rows| KeyRow::decode(stored(&consume.write(NOW, 0, Attempt::FIRST, rows)));
        for rows in [MessageRows::Narrow, MessageRows::Whole] {
            let claim = |hash: &str, now| {
                let request = ClaimRequest {
                    request_hash: hashing::stored_request_hash(hash),
                    ..request()
                };
                match plan(Some(read(rows)), false, &request, now) {
                    Plan::Answer(ClaimOutcome::Replay(_)) => "replay",
                    Plan::Answer(ClaimOutcome::Mismatch) => "mismatch",
                    Plan::Claim(a, _) if a == Attempt::FIRST => "claimed",
                    _ => "other",
                }
            };
            let expiry = NOW + 60 * SECOND;
            assert_eq!(claim("", expiry), "replay", "{rows:?}");
            assert_eq!(claim("h", expiry), "mismatch", "{rows:?}");
            assert_eq!(claim("h", expiry + 1), "claimed", "{rows:?}");
            let consumed = |now| match plan_consume(Some(&read(rows)), false, &consume, now) {
                ConsumePlan::Answer(Consumed::Duplicate) => "duplicate",
                ConsumePlan::Write(a) if a == Attempt::FIRST => "new",
                _ => "other",
            };
            assert_eq!(consumed(expiry), "duplicate", "{rows:?}");
            assert_eq!(consumed(expiry + 1), "new", "{rows:?}");
        }
    }

    /// A row with expires_at NULL is a message row: any other state there is impossible data,
    /// and is refused loudly.
    #[pg_test(error = "pg_idem internal error: reading idem.keys")]
    fn a_row_in_progress_without_expiry_is_refused() {
        let consume = ConsumeRequest {
            function: "idem_consume",
            tenant: "t",
            key: "k",
            ttl_us: SECOND,
        };
        let mut row = stored(&consume.write(NOW, 0, Attempt::FIRST, MessageRows::Narrow));
        row.state = Some(state_code(State::InProgress));
        KeyRow::decode(row);
    }

    /// A takeover hands the last checkpoint on; every other claim starts without one.
    #[pg_test]
    fn only_a_takeover_keeps_the_checkpoint() {
        let takeover = Attempt::after(&in_progress().seen(true));
        assert_eq!(
            takeover,
            Attempt {
                number: 2,
                takeover: true
            }
        );
        let kept = sets(&request().write(NOW, 8, takeover));
        assert!(!kept.contains(&Column::CheckpointPhase));
        assert!(!kept.contains(&Column::CheckpointData));
        let fresh = sets(&request().write(NOW, 8, Attempt::FIRST));
        assert!(fresh.contains(&Column::CheckpointPhase));
        assert!(fresh.contains(&Column::CheckpointData));
    }

    /// What each fenced operation changes, and the times it answers: a finish clears the lease
    /// and the checkpoint and keeps the key for its ttl from now; a heartbeat and a checkpoint
    /// never shorten the key's life; a release deletes, a fence guard only locks.
    #[pg_test]
    fn fenced_operations_change_exactly_their_columns() {
        let row = in_progress();
        let later = NOW + 10 * SECOND;
        let finish = FencedChange::Finish {
            state: State::Completed,
            response_code: Some(200),
            response_body: None,
            now: later,
        };
        let (effect, times) = finish.effect(&row);
        let Effect::Update(write) = effect else {
            panic!("a finish updates")
        };
        assert_eq!(
            sets(&write),
            [
                Column::State,
                Column::LeaseExpiresAt,
                Column::ExpiresAt,
                Column::ResponseCode,
                Column::ResponseBody,
                Column::CheckpointPhase,
                Column::CheckpointData
            ]
        );
        assert_eq!(times.expires_at, later + row.ttl());
        assert_eq!(times.lease_expires_at, None);

        let lease = later + 3600 * 24 * SECOND;
        let heartbeat = FencedChange::Heartbeat {
            lease_us: 3600 * 24 * SECOND,
            now: later,
        };
        let (effect, times) = heartbeat.effect(&row);
        let Effect::Update(write) = effect else {
            panic!("a heartbeat updates")
        };
        assert_eq!(sets(&write), [Column::LeaseExpiresAt, Column::ExpiresAt]);
        assert_eq!(
            (times.expires_at, times.lease_expires_at),
            (lease, Some(lease))
        );

        let checkpoint = FencedChange::Checkpoint {
            phase: "charged",
            data: None,
            now: later,
        };
        let (effect, times) = checkpoint.effect(&row);
        let Effect::Update(write) = effect else {
            panic!("a checkpoint updates")
        };
        assert_eq!(
            sets(&write),
            [
                Column::ExpiresAt,
                Column::CheckpointPhase,
                Column::CheckpointData
            ]
        );
        assert_eq!(times.expires_at, later + row.ttl());
        assert_eq!(times.lease_expires_at, row.lease_expires_at);

        assert!(matches!(
            FencedChange::Release.effect(&row).0,
            Effect::Delete
        ));
        assert!(matches!(
            FencedChange::AssertFence.effect(&row).0,
            Effect::Lock
        ));
    }

    /// Only the attempt in progress that was handed this very fence passes.
    #[pg_test]
    fn a_fence_holds_only_its_own_attempt_in_progress() {
        let target = super::Fenced {
            function: "idem_complete",
            tenant: "t",
            key: "k",
            fence: 7,
        };
        let mut row = in_progress();
        assert!(target.check(Some(&row)).is_ok());
        row.fence = 8;
        assert!(target.check(Some(&row)).is_err_and(|r| r.stale_fence));
        row.fence = 7;
        row.state = State::Completed;
        assert!(target.check(Some(&row)).is_err_and(|r| r.stale_fence));
        assert!(target.check(None).is_err_and(|r| !r.stale_fence));
    }
}
