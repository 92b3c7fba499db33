//! The key store: every read and write of `idem.keys`. The rules it follows are
//! `crate::rules` (what a claim, a consume and a fenced call answer, and what each writes);
//! the store finds rows, locks, waits and writes, and draws fences (`fences`).
//!
//! Two back-ends carry the rules out: `engine` (the default) works through the table and index
//! access methods; `spi` runs SQL statements through the executor where the engine cannot (Citus
//! must plan every statement on a distributed idem.keys; a hot standby; an idem.keys a DBA
//! extended with columns, defaults, triggers, rules or other indexes). `definition` says what
//! idem.keys must be for either back-end to touch it at all: a change to pg_idem's own columns
//! refuses every call. `with_store` picks one for the call; each operation is a method of
//! `Store` that hands the same arguments to the back-end's function. The purge (`purge`)
//! always runs SQL through SPI, whichever back-end serves the calls.
//!
//! Every time comparison uses the clock value the caller passes in (`now`), read once per call.

use pgrx::pg_sys;

use crate::errors;
use crate::pg::datum::CallMemory;
use crate::pg::time::Micros;
use crate::rules::fenced::FencedTimes;
use crate::rules::key_row::MessageRows;
use crate::rules::{
    ClaimOutcome, ClaimRequest, ConsumeRequest, Consumed, Fenced, FencedChange, Refused,
};

mod definition;
mod engine;
pub mod fences;
mod purge;
mod spi;

pub use purge::{purge, purge_batch, PurgeCursor, Tenants};

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
    /// and how it writes a consumed message (the engine knows it from `Keys`)
    Spi(&'a crate::pg::sql::Client<'a, 'c>, MessageRows),
}

/// The key store for one call (or one batch): the engine when it can, else SPI. Values it
/// returns that point into PostgreSQL memory (jsonb) live in `memory`, the call's, for `'m`.
pub struct Store<'a, 'c, 'm> {
    backend: Backend<'a, 'c>,
    memory: CallMemory<'m>,
}

/// Runs `f` with the key store of this call.
pub fn with_store<'m, R>(memory: CallMemory<'m>, f: impl FnOnce(&Store<'_, '_, 'm>) -> R) -> R {
    match engine::open() {
        engine::Opened::Engine(keys) => f(&Store {
            backend: Backend::Engine(keys),
            memory,
        }),
        engine::Opened::Spi(rows) => crate::pg::sql::with_client(|client| {
            f(&Store {
                backend: Backend::Spi(client, rows),
                memory,
            })
        }),
    }
}

impl<'m> Store<'_, '_, 'm> {
    /// Claims `request.key`. Never waits on another transaction that holds the key.
    pub fn claim(&self, request: &ClaimRequest<'_>, now: Micros) -> ClaimOutcome<'m> {
        match &self.backend {
            Backend::Engine(keys) => engine::claim(keys, request, now, self.memory),
            Backend::Spi(client, _) => spi::claim(client, request, now, self.memory),
        }
    }

    /// Applies `change` to the row holding the fence; returns the row's new times.
    pub fn fenced(
        &self,
        target: &Fenced<'_>,
        change: &FencedChange<'_>,
    ) -> Result<FencedTimes, Refused> {
        // as the executor's UPDATE, DELETE or SELECT FOR NO KEY UPDATE would, whatever the key
        // holds
        prevent_if_read_only(change.command());
        match &self.backend {
            Backend::Engine(keys) => engine::fenced(keys, target, change, self.memory),
            Backend::Spi(client, _) => spi::fenced(client, target, change, self.memory),
        }
    }

    /// Drops a key in any state; true if there was one. `function`: the SQL function that
    /// asks, named by its errors.
    pub fn forget(&self, function: &str, tenant: &str, key: &str) -> bool {
        prevent_if_read_only(c"DELETE");
        match &self.backend {
            Backend::Engine(keys) => engine::forget(keys, function, tenant, key, self.memory),
            Backend::Spi(client, _) => spi::forget(client, tenant, key),
        }
    }

    /// Records a message as processed in the caller's transaction (see
    /// `rules::consumes::plan_consume`); Err: an attempt in progress holds the key (55P03,
    /// raised by the caller once counted).
    pub fn consume(
        &self,
        request: &ConsumeRequest<'_>,
        now: Micros,
    ) -> Result<Consumed, errors::IdemError> {
        match &self.backend {
            Backend::Engine(keys) => engine::consume(keys, request, now, self.memory),
            Backend::Spi(client, rows) => spi::consume(client, request, *rows, now, self.memory),
        }
    }
}

/// Claims one key (see `Store::claim`).
pub fn claim<'m>(
    memory: CallMemory<'m>,
    request: &ClaimRequest<'_>,
    now: Micros,
) -> ClaimOutcome<'m> {
    with_store(memory, |store| store.claim(request, now))
}

/// Applies a fenced change to one key (see `Store::fenced`).
pub fn fenced(target: &Fenced<'_>, change: &FencedChange<'_>) -> Result<FencedTimes, Refused> {
    // SAFETY: in the SQL function's memory context; nothing allocated there is returned (the
    // rows read to check the fence are dropped here), so 'm is this call of `fenced`.
    let memory = unsafe { CallMemory::current() };
    with_store(memory, |store| store.fenced(target, change))
}

/// Drops one key (see `Store::forget`).
pub fn forget(function: &str, tenant: &str, key: &str) -> bool {
    // SAFETY: as in `fenced`: nothing allocated in it is returned.
    let memory = unsafe { CallMemory::current() };
    with_store(memory, |store| store.forget(function, tenant, key))
}
