//! What a decision reads of a key's row: its state, whether it was stored for this request,
//! its attempt and its two times. When a key counts as absent (expired) and when its lease is
//! live are said here once.

use crate::time::Micros;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    InProgress,
    Completed,
    Failed,
}

impl State {
    /// The `"char"` stored in idem.keys.state.
    pub fn code(self) -> u8 {
        match self {
            State::InProgress => b'p',
            State::Completed => b'c',
            State::Failed => b'f',
        }
    }

    /// The state a stored code names; None for a code pg_idem never writes.
    pub fn from_code(code: u8) -> Option<State> {
        match code {
            b'p' => Some(State::InProgress),
            b'c' => Some(State::Completed),
            b'f' => Some(State::Failed),
            _ => None,
        }
    }
}

/// A key's row as a decision sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    pub state: State,
    /// the row's request hash is the caller's
    pub same_request: bool,
    pub attempt: i32,
    /// None for a row that never had a lease (a consumed message)
    pub lease_expires_at: Option<Micros>,
    pub expires_at: Micros,
}

impl Seen {
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
    pub fn after(row: &Seen) -> Attempt {
        Attempt {
            number: row.attempt.saturating_add(1),
            takeover: true,
        }
    }
}
