//! A key as stored in idem.keys, and the rules of its times: when it counts as absent (expired),
//! when its lease is live, when only a purge may act on it.

use crate::errors;
use crate::hashing;
use crate::pg::datum::Jsonb;
use crate::pg::time::Micros;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    InProgress,
    Completed,
    Failed,
}

impl State {
    /// The `"char"` stored in idem.keys.state.
    pub fn code(self) -> i8 {
        (match self {
            State::InProgress => b'p',
            State::Completed => b'c',
            State::Failed => b'f',
        }) as i8
    }

    pub fn from_code(code: i8) -> State {
        match code as u8 {
            b'p' => State::InProgress,
            b'c' => State::Completed,
            b'f' => State::Failed,
            _ => impossible(format!("state {:?}", code as u8 as char)),
        }
    }
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
    /// the key's ttl, in microseconds (`crate::pg::time::interval_micros`)
    pub ttl_us: i64,
}

impl KeyRow<'_> {
    /// Past its expires_at a key counts as absent, purged yet or not.
    pub fn is_expired(&self, now: Micros) -> bool {
        now > self.expires_at
    }

    pub fn lease_is_live(&self, now: Micros) -> bool {
        self.lease_expires_at.is_some_and(|lease| now <= lease)
    }

    /// Expired with no live lease: only a purge may be acting on it.
    pub fn is_purgeable(&self, now: Micros) -> bool {
        self.is_expired(now) && !self.lease_is_live(now)
    }
}

/// The same three rules in SQL, for statements that test many rows at once (the purge, the key
/// statistics): conditions on the row of table alias `t` at the clock in parameter `now` (such
/// as "$1"). A test checks each equal to its method of `KeyRow` at every boundary.
pub mod in_sql {
    pub fn is_expired(t: &str, now: &str) -> String {
        format!("{t}.expires_at OPERATOR(pg_catalog.<) {now}")
    }

    pub fn lease_is_not_live(t: &str, now: &str) -> String {
        format!(
            "({t}.lease_expires_at IS NULL OR {t}.lease_expires_at OPERATOR(pg_catalog.<) {now})"
        )
    }

    /// `after(now, ttl)` for the row's own ttl: the same instant for every ttl pg_idem stores
    /// (microseconds only, `crate::pg::time::interval`).
    pub fn ttl_after(t: &str, now: &str) -> String {
        format!("{now} OPERATOR(pg_catalog.+) {t}.ttl")
    }

    pub fn is_purgeable(t: &str, now: &str) -> String {
        format!("{} AND {}", is_expired(t, now), lease_is_not_live(t, now))
    }
}

/// Which attempt a write makes: the first, or the next one after an attempt whose lease passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub number: i32,
    /// it takes over an attempt whose lease passed (which hands its checkpoint on)
    pub takeover: bool,
}

impl Attempt {
    pub const FIRST: Attempt = Attempt {
        number: 1,
        takeover: false,
    };

    /// The attempt that takes over `row`'s.
    pub fn after(row: &KeyRow<'_>) -> Attempt {
        Attempt {
            number: row.attempt.saturating_add(1),
            takeover: true,
        }
    }
}

/// `at` plus a duration in microseconds: the one way pg_idem adds a lease or a ttl to a time.
/// It saturates rather than fail: leases and ttls are at most 100 years, so only an `at` near
/// the end of time could reach the bound.
pub fn after(at: Micros, duration_us: i64) -> Micros {
    at.saturating_add(duration_us)
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
