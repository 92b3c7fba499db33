//! A key as stored in idem.keys, and the rules of its times: when it counts as absent (expired),
//! when its lease is live, when only a purge may act on it.

use crate::errors;
use crate::hashing;
use crate::pg::datum::Jsonb;
use crate::pg::time::Micros;

pub use pg_idem_rules::{after, Attempt, State};

/// The `"char"` stored in idem.keys.state.
pub fn state_code(state: State) -> i8 {
    state.code() as i8
}

/// The state a stored `"char"` names.
pub fn state_from_code(code: i8) -> State {
    State::from_code(code as u8)
        .unwrap_or_else(|| impossible(format!("state {:?}", code as u8 as char)))
}

/// A key as stored; its jsonb lives in the caller's memory context `'m`.
pub struct KeyRow<'m> {
    pub fence: i64,
    pub state: State,
    pub request_hash: [u8; hashing::STORED_HASH_BYTES],
    pub attempt: i32,
    pub response_code: Option<i32>,
    pub response_body: Option<Jsonb<'m>>,
    pub lease_expires_at: Option<Micros>,
    pub expires_at: Micros,
    /// the key's ttl, in microseconds (`crate::pg::time::interval_micros`); None for a message
    /// row, whose expiry never moves again
    pub ttl_us: Option<i64>,
    /// the attempt's last checkpoint, which a takeover hands on (`claims::plan`)
    pub checkpoint: Checkpoint<'m>,
}

/// A checkpoint as stored: its phase and its data.
pub type Checkpoint<'m> = (Option<String>, Option<Jsonb<'m>>);

/// A key's columns as stored, NULL as None: what a back-end read, before `KeyRow::decode`
/// says what they mean.
pub struct StoredRow<'m> {
    pub fence: Option<i64>,
    pub state: Option<i8>,
    pub request_hash: Option<[u8; hashing::STORED_HASH_BYTES]>,
    pub attempt: Option<i32>,
    pub response_code: Option<i32>,
    pub response_body: Option<Jsonb<'m>>,
    pub lease_expires_at: Option<Micros>,
    pub expires_at: Option<Micros>,
    pub purge_after: Option<Micros>,
    pub ttl: Option<i64>,
    pub checkpoint: Checkpoint<'m>,
}

/// How a message recorded by idem_consume is stored (`consumes::ConsumeRequest::write`).
///
/// A message row is what most keys of a consumer are, so since 0.5.0 it stores only what a
/// message has: it names its key, is completed, and expires. Every other column is NULL, and a
/// NULL costs one bit of the row's null bitmap instead of 53 bytes:
///
/// | column       | in a message row | read as                                              |
/// |--------------|------------------|------------------------------------------------------|
/// | expires_at   | NULL             | purge_after (set to the expiry itself: it never moves) |
/// | fence        | NULL             | 0: a consume hands out no fence                      |
/// | attempt      | NULL             | 1, unless it took over an attempt of idem_claim      |
/// | request_hash | NULL             | the empty fingerprint's: idem_claim with '' replays it |
/// | claimed_at   | NULL             | (not read)                                           |
/// | ttl          | NULL             | none: nothing moves the expiry of a finished key     |
///
/// A row with expires_at NULL is a message row; any other row has all of these columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageRows {
    /// the layout above (0.5.0 and later)
    Narrow,
    /// every column set, as 0.4.0 stored a message: the columns are still NOT NULL, until
    /// ALTER EXTENSION pg_idem UPDATE (a server runs the new library with the old schema)
    Whole,
}

impl<'m> KeyRow<'m> {
    /// The key a stored row holds: the one place that says what a NULL means (`MessageRows`).
    pub fn decode(stored: StoredRow<'m>) -> KeyRow<'m> {
        let state = state_from_code(not_null(stored.state, "state"));
        let Some(expires_at) = stored.expires_at else {
            // a message row
            if state != State::Completed || stored.ttl.is_some() {
                impossible(format!(
                    "expires_at NULL in a row in state {state:?} (ttl {:?})",
                    stored.ttl
                ));
            }
            return KeyRow {
                fence: stored.fence.unwrap_or(0),
                state,
                request_hash: stored.request_hash.unwrap_or_else(message_request_hash),
                attempt: stored.attempt.unwrap_or(1),
                response_code: stored.response_code,
                response_body: stored.response_body,
                lease_expires_at: stored.lease_expires_at,
                expires_at: not_null(stored.purge_after, "purge_after"),
                ttl_us: None,
                checkpoint: stored.checkpoint,
            };
        };
        KeyRow {
            fence: not_null(stored.fence, "fence"),
            state,
            request_hash: not_null(stored.request_hash, "request_hash"),
            attempt: not_null(stored.attempt, "attempt"),
            response_code: stored.response_code,
            response_body: stored.response_body,
            lease_expires_at: stored.lease_expires_at,
            expires_at,
            ttl_us: Some(not_null(stored.ttl, "ttl")),
            checkpoint: stored.checkpoint,
        }
    }
}

/// The request hash a consumed message answers to: the empty fingerprint's, so that idem_claim
/// with request_hash '' replays it as completed, and any other hash is a mismatch.
pub fn message_request_hash() -> [u8; hashing::STORED_HASH_BYTES] {
    // every narrow row read needs it: hashed once per backend
    static EMPTY: std::sync::OnceLock<[u8; hashing::STORED_HASH_BYTES]> =
        std::sync::OnceLock::new();
    *EMPTY.get_or_init(|| hashing::stored_request_hash(""))
}

impl KeyRow<'_> {
    /// The ttl of a key in progress (only those are finished, kept alive or checkpointed).
    pub fn ttl(&self) -> i64 {
        self.ttl_us
            .unwrap_or_else(|| impossible(format!("ttl NULL in a row in state {:?}", self.state)))
    }

    /// The row as the decisions (`pg_idem_rules`) see it; `same_request`: whether it was
    /// stored for the caller's request hash.
    pub fn seen(&self, same_request: bool) -> pg_idem_rules::Seen {
        pg_idem_rules::Seen {
            state: self.state,
            same_request,
            attempt: self.attempt,
            lease_expires_at: self.lease_expires_at,
            expires_at: self.expires_at,
        }
    }

    /// Expired with no live lease: only a purge may be acting on it.
    pub fn is_purgeable(&self, now: Micros) -> bool {
        self.seen(true).is_purgeable(now)
    }
}

/// The same three rules in SQL, for statements that test many rows at once (the purge, the key
/// statistics): conditions on the row of table alias `t` at the clock in parameter `now` (such
/// as "$1"). A test checks each equal to its method of `KeyRow` at every boundary.
pub mod in_sql {
    /// When the key expires: a message row's expires_at is NULL, and its purge_after the
    /// expiry (`super::MessageRows`).
    pub fn expiry(t: &str) -> String {
        // COALESCE is a keyword of the grammar, not a function a search_path could resolve
        format!("COALESCE({t}.expires_at, {t}.purge_after)")
    }

    pub fn is_expired(t: &str, now: &str) -> String {
        format!("{} OPERATOR(pg_catalog.<) {now}", expiry(t))
    }

    pub fn lease_is_not_live(t: &str, now: &str) -> String {
        format!(
            "({t}.lease_expires_at IS NULL OR {t}.lease_expires_at OPERATOR(pg_catalog.<) {now})"
        )
    }

    /// `after(now, ttl)` for the row's own ttl: the same instant for every ttl pg_idem stores
    /// (microseconds only, `crate::pg::time::interval`). Only for a key that has not expired
    /// (the purge re-arms those): never a message row, whose ttl is NULL.
    pub fn ttl_after(t: &str, now: &str) -> String {
        format!("{now} OPERATOR(pg_catalog.+) {t}.ttl")
    }

    pub fn is_purgeable(t: &str, now: &str) -> String {
        format!("{} AND {}", is_expired(t, now), lease_is_not_live(t, now))
    }
}

/// A stored request hash, as read from its column.
pub fn stored_hash(bytes: &[u8]) -> [u8; hashing::STORED_HASH_BYTES] {
    bytes
        .try_into()
        .unwrap_or_else(|_| impossible(format!("request hash of {} bytes", bytes.len())))
}

/// idem.keys holds something only a bug (or a hand edit of the table) can put there.
pub fn impossible(what: String) -> ! {
    errors::internal("reading idem.keys", format!("unexpected {what}")).raise()
}

/// The value of a NOT NULL column.
pub fn not_null<T>(value: Option<T>, column: &str) -> T {
    value.unwrap_or_else(|| impossible(format!("NULL in column {column}")))
}
