//! The key store: every read and write of `idem.keys`, and the rules both of its back-ends
//! follow, in one place: what a claim answers for the row it finds (`plan`), what a consumed
//! message answers (`plan_consume`), what a fenced change does to a row's times
//! (`FencedChange::times`), why a fenced call is refused (`Fenced::refusal_for`), and how fences
//! are drawn (`fences`).
//!
//! Two back-ends carry them out: `engine` (the default) works through the table and index
//! access methods; `spi` runs prepared statements where the engine cannot (Citus must plan
//! every statement on a distributed idem.keys; a hot standby; an idem.keys a DBA extended with
//! columns, defaults, triggers, rules or other indexes). `definition` says what idem.keys must
//! be for either back-end to touch it at all: a change to pg_idem's own columns refuses every
//! call. `with_store` picks one for the call; each operation is a method of `Store` that hands
//! the same arguments to the back-end's function. The purge always takes SPI.
//!
//! Every time comparison uses the clock value the caller passes in (`now`), read once per call.

use pgrx::pg_sys;

use crate::errors::{self, LeaseLost};
use crate::hashing;
use crate::pg::datum::Jsonb;
use crate::pg::time::{plus, Micros};

mod definition;
mod engine;
pub mod fences;
mod spi;

pub use spi::{purge, purge_batch, PurgeCursor, Tenants};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    InProgress,
    Completed,
    Failed,
}

impl State {
    pub fn code(self) -> i8 {
        (match self {
            State::InProgress => b'p',
            State::Completed => b'c',
            State::Failed => b'f',
        }) as i8
    }

    fn from_code(code: i8) -> State {
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
    pub state: State,
    pub request_hash: [u8; hashing::STORED_HASH_BYTES],
    pub attempt: i32,
    pub response_code: Option<i32>,
    pub response_body: Option<Jsonb<'m>>,
    pub lease_expires_at: Option<Micros>,
    pub expires_at: Micros,
}

impl KeyRow<'_> {
    /// Past its expires_at a key counts as absent, purged yet or not.
    pub fn is_expired(&self, now: Micros) -> bool {
        now > self.expires_at
    }

    pub fn lease_is_live(&self, now: Micros) -> bool {
        self.lease_expires_at.is_some_and(|lease| now <= lease)
    }

    /// Expired with no live lease: only a purge may be acting on it (the purge's own test, in
    /// SQL, is `spi::purgeable`).
    pub fn is_purgeable(&self, now: Micros) -> bool {
        self.is_expired(now) && !self.lease_is_live(now)
    }
}

/// A stored request hash, as read from its column.
fn stored_hash(bytes: &[u8]) -> [u8; hashing::STORED_HASH_BYTES] {
    bytes
        .try_into()
        .unwrap_or_else(|_| impossible(format!("request hash of {} bytes", bytes.len())))
}

/// idem.keys holds something only a bug (or a hand edit of the table) can put there.
fn impossible(what: String) -> ! {
    errors::internal("reading idem.keys", format!("unexpected {what}")).raise()
}

/// The value of a NOT NULL column.
fn not_null<T>(value: Option<T>, column: &str) -> T {
    value.unwrap_or_else(|| impossible(format!("NULL in column {column}")))
}

fn snapshot_per_transaction() -> bool {
    // SAFETY: reads the current transaction's isolation level, set for the whole transaction.
    unsafe { pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 }
}

/// Whether the transaction may not write (SET TRANSACTION READ ONLY, or a hot standby).
fn read_only() -> bool {
    // SAFETY: a plain read of this backend's transaction state.
    unsafe { pg_sys::XactReadOnly }
}

/// The executor refuses writes in a read-only transaction with 25006; so does the key store,
/// with the same message, on both paths.
fn prevent_if_read_only(command: &std::ffi::CStr) {
    // SAFETY: raises 25006 when the transaction is read-only, otherwise returns.
    unsafe { pg_sys::PreventCommandIfReadOnly(command.as_ptr()) }
}

/// Waits for the transaction `xid` to end (as a row lock wait: interruptible, bounded by
/// lock_timeout and statement_timeout, deadlock-checked).
fn wait_for(xid: pg_sys::TransactionId) {
    // SAFETY: waits on the transaction's lock; no relation context is reported.
    unsafe {
        pg_sys::XactLockTableWait(
            xid,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            pg_sys::XLTW_Oper::XLTW_None,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The store of this call
// ---------------------------------------------------------------------------------------------

enum Backend<'a, 'c> {
    Engine(engine::Keys),
    Spi(&'a crate::pg::sql::Client<'a, 'c>),
}

/// The key store for one call (or one batch): the engine when it can, else SPI. Values it
/// returns that point into PostgreSQL memory (jsonb) live in the memory context the caller was
/// in when `with_store` began.
pub struct Store<'a, 'c> {
    backend: Backend<'a, 'c>,
    outer: pg_sys::MemoryContext,
}

/// Runs `f` with the key store of this call.
pub fn with_store<R>(f: impl FnOnce(&Store<'_, '_>) -> R) -> R {
    // SAFETY: reads the current memory context: the SQL function's.
    let outer = unsafe { pg_sys::CurrentMemoryContext };
    match engine::open() {
        Some(keys) => f(&Store {
            backend: Backend::Engine(keys),
            outer,
        }),
        None => crate::pg::sql::with_client(|client| {
            f(&Store {
                backend: Backend::Spi(client),
                outer,
            })
        }),
    }
}

impl Store<'_, '_> {
    /// Claims `request.key`. Never waits on another transaction that holds the key.
    pub fn claim<'m>(&self, request: &ClaimRequest<'_>, now: Micros) -> ClaimOutcome<'m> {
        match &self.backend {
            Backend::Engine(keys) => engine::claim(keys, request, now, self.outer),
            Backend::Spi(client) => spi::claim(client, request, now),
        }
    }

    /// Applies `change` to the row holding the fence; returns the row's new expires_at and
    /// lease_expires_at.
    pub fn fenced(
        &self,
        target: &Fenced<'_>,
        change: &FencedChange<'_>,
    ) -> Result<(Micros, Option<Micros>), Refused> {
        match &self.backend {
            Backend::Engine(keys) => engine::fenced(keys, target, change, self.outer),
            Backend::Spi(client) => spi::fenced(client, target, change),
        }
    }

    /// Drops a key in any state; true if there was one.
    pub fn forget(&self, tenant: &str, key: &str) -> bool {
        match &self.backend {
            Backend::Engine(keys) => engine::forget(keys, tenant, key),
            Backend::Spi(client) => spi::forget(client, tenant, key),
        }
    }

    /// Records a message as processed in the caller's transaction (see `plan_consume`); Err:
    /// an attempt in progress holds the key (55P03, raised by the caller once counted).
    pub fn consume(
        &self,
        request: &ConsumeRequest<'_>,
        now: Micros,
    ) -> Result<Consumed, errors::IdemError> {
        match &self.backend {
            Backend::Engine(keys) => engine::consume(keys, request, now, self.outer),
            Backend::Spi(client) => spi::consume(client, request, now),
        }
    }
}

/// Claims one key (see `Store::claim`).
pub fn claim<'m>(request: &ClaimRequest<'_>, now: Micros) -> ClaimOutcome<'m> {
    with_store(|store| store.claim(request, now))
}

/// Applies a fenced change to one key (see `Store::fenced`).
pub fn fenced(
    target: &Fenced<'_>,
    change: &FencedChange<'_>,
) -> Result<(Micros, Option<Micros>), Refused> {
    with_store(|store| store.fenced(target, change))
}

/// Drops one key (see `Store::forget`).
pub fn forget(tenant: &str, key: &str) -> bool {
    with_store(|store| store.forget(tenant, key))
}

// ---------------------------------------------------------------------------------------------
// Claims
// ---------------------------------------------------------------------------------------------

pub struct ClaimRequest<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub request_hash: [u8; hashing::STORED_HASH_BYTES],
    pub lease_us: i64,
    pub ttl_us: i64,
    pub reject_stale_uuidv7: bool,
}

impl ClaimRequest<'_> {
    /// The times of an attempt claimed now: (lease_expires_at, expires_at, purge_after). A key
    /// in progress never expires before its lease; purge_after is the lower bound of
    /// expires_at the purge walks.
    fn times(&self, now: Micros) -> (Micros, Micros, Micros) {
        let lease_expires_at = now.saturating_add(self.lease_us);
        let purge_after = now.saturating_add(self.ttl_us);
        (
            lease_expires_at,
            purge_after.max(lease_expires_at),
            purge_after,
        )
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
enum Plan<'m> {
    Answer(ClaimOutcome<'m>),
    /// No live row: claim the key afresh (attempt 1), in place of an expired row if there is one.
    Fresh,
    /// A committed attempt's lease has passed: take over with the next attempt number.
    TakeOver {
        attempt: i32,
    },
}

/// What a claim answers for `row`, the key as the claim sees it; `mine`: the row is this
/// transaction's own attempt (it claimed the key, or proved its fence with a fenced call).
/// However long that attempt has run past its lease or ttl, a takeover would make its own
/// fence stale under its feet, so it stays in progress.
fn plan<'m>(
    row: Option<KeyRow<'m>>,
    mine: bool,
    request: &ClaimRequest<'_>,
    now: Micros,
) -> Plan<'m> {
    let row = match row {
        Some(row)
            if mine
                && row.state == State::InProgress
                && row.request_hash == request.request_hash =>
        {
            return Plan::Answer(ClaimOutcome::InProgress(Some(row)));
        }
        Some(row) if !row.is_expired(now) => row,
        _ if is_stale_uuidv7(request, now) => return Plan::Answer(ClaimOutcome::StaleKey),
        _ => return Plan::Fresh,
    };
    if row.request_hash != request.request_hash {
        return Plan::Answer(ClaimOutcome::Mismatch);
    }
    match row.state {
        State::Completed | State::Failed => Plan::Answer(ClaimOutcome::Replay(row)),
        State::InProgress if row.lease_is_live(now) => {
            Plan::Answer(ClaimOutcome::InProgress(Some(row)))
        }
        State::InProgress => Plan::TakeOver {
            attempt: row.attempt.saturating_add(1),
        },
    }
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

/// How many times a claim re-reads the key when a concurrent commit changed it under its feet.
/// At READ COMMITTED one re-read always settles it; the bound only guards against livelock.
const CLAIM_ROUNDS: usize = 4;

// ---------------------------------------------------------------------------------------------
// Consumed messages
// ---------------------------------------------------------------------------------------------

pub struct ConsumeRequest<'a> {
    pub tenant: &'a str,
    pub key: &'a str,
    pub ttl_us: i64,
}

impl ConsumeRequest<'_> {
    /// The request hash a consumed key stores: the empty fingerprint's, so that idem_claim
    /// with request_hash '' replays it as completed, and any other hash is a mismatch.
    fn request_hash() -> [u8; hashing::STORED_HASH_BYTES] {
        hashing::stored_request_hash("")
    }

    /// (expires_at, purge_after) of a message consumed now: it is kept for its ttl.
    fn times(&self, now: Micros) -> (Micros, Micros) {
        let expires_at = now.saturating_add(self.ttl_us);
        (expires_at, expires_at)
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
enum ConsumePlan {
    Answer(Consumed),
    /// An attempt in progress holds the key: the error to raise.
    Held(errors::IdemError),
    /// Record it as processed: afresh (attempt 1), or in place of an expired row, or taking
    /// over an attempt of idem_claim whose lease passed (the next attempt number).
    Write {
        attempt: i32,
        takeover: bool,
    },
}

/// The rule of idem_consume for `row`, the key's latest committed version (or this
/// transaction's own): an absent or expired key is new; a completed or failed one was
/// processed; an attempt of idem_claim in progress under a live lease (or this transaction's
/// own attempt) cannot be decided, so the call fails with 55P03 (the message must not be
/// acknowledged: it will be redelivered); one whose lease has passed is taken over, as a claim
/// would: its fence is refused from then on.
fn plan_consume(
    row: Option<&KeyRow<'_>>,
    mine: bool,
    request: &ConsumeRequest<'_>,
    now: Micros,
) -> ConsumePlan {
    let row = match row {
        // this transaction's own attempt stays its own however long it has run past its lease
        // or ttl (as in `plan`): writing over it would make its fence stale under its feet
        Some(row) if mine && row.state == State::InProgress => {
            return ConsumePlan::Held(errors::consume_in_progress(
                request.tenant,
                request.key,
                row.lease_expires_at.map(crate::pg::time::timestamptz),
                true,
            ))
        }
        Some(row) if !row.is_expired(now) => row,
        _ => {
            return ConsumePlan::Write {
                attempt: 1,
                takeover: false,
            }
        }
    };
    match row.state {
        State::Completed | State::Failed => ConsumePlan::Answer(Consumed::Duplicate),
        State::InProgress if mine || row.lease_is_live(now) => {
            ConsumePlan::Held(errors::consume_in_progress(
                request.tenant,
                request.key,
                row.lease_expires_at.map(crate::pg::time::timestamptz),
                mine,
            ))
        }
        State::InProgress => ConsumePlan::Write {
            attempt: row.attempt.saturating_add(1),
            takeover: true,
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Operations under a fence
// ---------------------------------------------------------------------------------------------

/// The key a fenced operation addresses.
pub struct Fenced<'a> {
    pub function: &'static str,
    pub tenant: &'a str,
    pub key: &'a str,
    pub fence: i64,
}

impl Fenced<'_> {
    /// Why a fenced operation found no row holding its fence, given the key's row.
    fn refusal_for(&self, row: Option<&KeyRow<'_>>) -> Refused {
        match row {
            None => Refused {
                error: errors::key_not_found(self.function, self.tenant, self.key, self.fence),
                stale_fence: false,
            },
            Some(row) => {
                let why = match row.state {
                    State::Completed => LeaseLost::Completed,
                    State::Failed => LeaseLost::Failed,
                    State::InProgress => LeaseLost::NotHolder,
                };
                Refused {
                    error: errors::lease_lost(
                        self.function,
                        self.tenant,
                        self.key,
                        self.fence,
                        why,
                    ),
                    stale_fence: true,
                }
            }
        }
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
    /// Extends the lease.
    Heartbeat {
        lease_expires_at: Micros,
        now: Micros,
    },
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

impl FencedChange<'_> {
    /// The row's (expires_at, lease_expires_at) after the change, from what they are and the
    /// key's ttl (an interval datum): a final outcome is replayed for ttl from now; a sign of
    /// life keeps the key for its ttl from now on and never less than its lease.
    fn times(
        &self,
        expires_at: Micros,
        lease_expires_at: Option<Micros>,
        ttl: pg_sys::Datum,
    ) -> (Micros, Option<Micros>) {
        match *self {
            FencedChange::Finish { now, .. } => (plus(now, ttl), None),
            FencedChange::Heartbeat {
                lease_expires_at,
                now,
            } => (
                expires_at.max(lease_expires_at).max(plus(now, ttl)),
                Some(lease_expires_at),
            ),
            FencedChange::Checkpoint { now, .. } => {
                (expires_at.max(plus(now, ttl)), lease_expires_at)
            }
            FencedChange::Release | FencedChange::AssertFence => (expires_at, lease_expires_at),
        }
    }

    /// The statement the executor would run for it, as PreventCommandIfReadOnly names it.
    fn command(&self) -> &'static std::ffi::CStr {
        match self {
            FencedChange::Release => c"DELETE",
            FencedChange::AssertFence => c"SELECT FOR NO KEY UPDATE",
            _ => c"UPDATE",
        }
    }
}
