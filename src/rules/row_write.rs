//! What a write does to a key's row, column by column: the one statement of which columns a
//! claim, a takeover, a consume, a finish, a heartbeat and a checkpoint set. The engine turns it
//! into datums over the row it found (`store::engine`); the SPI path into an INSERT or UPDATE
//! naming exactly these columns (`store::spi`).

use crate::enum_list::enum_list;
use crate::hashing;
use crate::pg::datum::Jsonb;
use crate::pg::time::Micros;
use crate::rules::key_row::State;

enum_list! {
/// pg_idem's columns of idem.keys that a write sets (tenant and key name the row; a new row
/// gets them from the request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    Fence,
    Attempt,
    State,
    RequestHash,
    ClaimedAt,
    LeaseExpiresAt,
    ExpiresAt,
    PurgeAfter,
    Ttl,
    ResponseCode,
    ResponseBody,
    CheckpointPhase,
    CheckpointData,
}
}

impl Column {
    /// The column's name in idem.keys.
    pub fn name(self) -> &'static str {
        match self {
            Column::Fence => "fence",
            Column::Attempt => "attempt",
            Column::State => "state",
            Column::RequestHash => "request_hash",
            Column::ClaimedAt => "claimed_at",
            Column::LeaseExpiresAt => "lease_expires_at",
            Column::ExpiresAt => "expires_at",
            Column::PurgeAfter => "purge_after",
            Column::Ttl => "ttl",
            Column::ResponseCode => "response_code",
            Column::ResponseBody => "response_body",
            Column::CheckpointPhase => "checkpoint_phase",
            Column::CheckpointData => "checkpoint_data",
        }
    }
}

/// A value written to a column; `Null` is typed by the column it goes to.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    Null,
    Int8(i64),
    Int4(i32),
    State(State),
    Hash([u8; hashing::STORED_HASH_BYTES]),
    /// a timestamptz
    Time(Micros),
    /// an interval of this many microseconds (no months or days: adding it never depends on
    /// the calendar or the session's time zone)
    Duration(i64),
    Text(&'a str),
    Jsonb(Jsonb<'a>),
}

impl<'a> From<Option<Jsonb<'a>>> for Value<'a> {
    fn from(value: Option<Jsonb<'a>>) -> Self {
        value.map_or(Value::Null, Value::Jsonb)
    }
}

/// How a write sets one column.
#[derive(Clone, Copy, Debug)]
pub enum Assign<'a> {
    To(Value<'a>),
    /// A timestamptz that only ever moves down on an existing row (a new row gets the value):
    /// purge_after, which then keeps the value it already has in the common case, so that the
    /// update stays HOT.
    AtMost(Micros),
}

/// The columns a write sets; the others keep their values.
#[derive(Clone, Copy, Debug)]
pub struct RowWrite<'a> {
    assigns: [Option<Assign<'a>>; Column::ALL.len()],
}

impl<'a> RowWrite<'a> {
    pub fn new() -> Self {
        RowWrite {
            assigns: [None; Column::ALL.len()],
        }
    }

    pub fn set(mut self, column: Column, value: Value<'a>) -> Self {
        self.assigns[column as usize] = Some(Assign::To(value));
        self
    }

    pub fn lower(mut self, column: Column, bound: Micros) -> Self {
        self.assigns[column as usize] = Some(Assign::AtMost(bound));
        self
    }

    /// Every column the write sets, in `Column` order.
    pub fn assignments(&self) -> impl Iterator<Item = (Column, Assign<'a>)> + '_ {
        Column::ALL
            .iter()
            .filter_map(|&c| self.assigns[c as usize].map(|a| (c, a)))
    }

    /// Whether it sets every column, as the write of a new row must.
    pub fn is_whole_row(&self) -> bool {
        self.assigns.iter().all(Option::is_some)
    }

    /// Which columns it sets and how (bit 2c: set, bit 2c+1: at most): what an SQL statement
    /// applying it depends on, whatever the values.
    pub fn shape(&self) -> u64 {
        self.assignments().fold(0, |shape, (c, a)| {
            let bit = 2 * c as u64 + u64::from(matches!(a, Assign::AtMost(_)));
            shape | 1 << bit
        })
    }
}
