//! Fences (fencing tokens): the one rule for drawing them, for both back-ends of the key store.
//!
//! A fence handed out later is larger than every fence handed out before, whichever backend
//! hands it out, across releases, purges, crashes, restarts, dump/restore, pg_upgrade and (with
//! the clock assumption below) failover to a standby.
//!
//! With pg_idem preloaded (shared memory), a fence is
//!
//!   max(the last fence this server handed out + 1, the clock in microseconds since
//!       2000-01-01, the caller's floor: a takeover's is the fence it replaces + 1)
//!
//! drawn from one atomic counter in shared memory: unique and increasing across backends, with
//! no lock, no buffer and no WAL on the request path (the sequence it replaces took a buffer
//! lock on one page shared by every backend, and its WAL was never flushed: a crash or a
//! failover could hand out again the fences of transactions that had not committed, although
//! their callers may have passed them on already).
//!
//! Durability, without trusting the clock: a fence is handed out only once idem.fence_seq, the
//! database's *floor*, is at least that fence and flushed to WAL. The floor is raised a minute
//! of clock ahead at a time (setval, then XLogFlush), so about once a minute per database, by
//! whichever claim crosses it; every other backend learns the new floor by reading the sequence
//! under the same lock. After a crash or a restart, the first fence a database draws is above its
//! floor (the counter is lifted to it once per server lifetime, never again: a floor raised in
//! this lifetime is ahead of the clock, and lifting to it would run fences ahead of the clock,
//! which the failover term below needs), so it exceeds every fence handed out before, whatever
//! the clock says. Fences restored into idem.keys while the server runs (a restore's COPY) lift
//! the counter as they are written (`seen`, through the trigger `lift_fence_clock`), so fences
//! drawn after the restore are above them without a restart. Shared memory keeps one slot per
//! database: creating the extension again reuses it, and a dropped database's slot is freed when another needs one. idem.fence_seq is WAL-logged, so it reaches standbys, pg_dump and
//! pg_upgrade keep it.
//!
//! Failover: a promoted standby has the floor as far as it had replayed the WAL. Fences there
//! exceed those handed out by the old primary because of the clock term: it holds as long as
//! the new primary's clock is not behind the old primary's by more than the failover took
//! (NTP keeps clocks within milliseconds). The same term orders fences across the nodes of a
//! Citus cluster.
//!
//! Without the preload there is no shared memory: fences come from nextval(idem.fence_seq), and
//! whenever nextval writes WAL (it logs 32 values ahead) that WAL is flushed before the fence is
//! used, so a crash cannot hand them out again; across failover, what the standby replayed.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic};

use crate::errors;
use crate::pg::locks::Lock;
use crate::pg::owner;
use crate::pg::preload;
use crate::pg::time::{clock, Micros};

/// How far ahead of the fence that crossed it the floor is raised: a minute of clock.
const FLOOR_AHEAD: Micros = 60 * 1_000_000;

/// Databases one server lifetime can draw fences for at once. A dropped database's slot is
/// reused, and re-creating the extension in a database reuses the database's slot. Debug
/// builds, which the test command installs, hold 256, so that tests/behaviour/fence_tokens.rs runs
/// past the end of the table in seconds on every version (4,200 re-creations took six minutes);
/// the code that uses them is the same.
const SLOTS: usize = if cfg!(debug_assertions) { 256 } else { 4096 };

/// The floor of one database's fence sequence, as this server lifetime knows it.
struct Slot {
    /// The database's OID; 0 while the slot is free.
    database: AtomicU32,
    /// The fence sequence `lifted` and `floor` are about; 0 until the first fence.
    sequence: AtomicU32,
    /// The sequence's value when this lifetime first drew from it (at least 1 once set): every
    /// fence handed out before, by an earlier server lifetime, is at most this. 0 until then.
    lifted: AtomicI64,
    /// Fences up to this are covered by the sequence, flushed.
    floor: AtomicI64,
}

impl Slot {
    /// Forgets what the slot knew: the next fence lifts again (safe at any time: a lift only
    /// raises the counter).
    fn forget(&self) {
        self.lifted.store(0, Ordering::Release);
        self.floor.store(0, Ordering::Release);
        self.sequence.store(0, Ordering::Release);
    }
}

pub struct FenceClock {
    last: AtomicI64,
    slots: [Slot; SLOTS],
}

impl Default for FenceClock {
    fn default() -> Self {
        FenceClock {
            last: AtomicI64::new(0),
            slots: std::array::from_fn(|_| Slot {
                database: AtomicU32::new(0),
                sequence: AtomicU32::new(0),
                lifted: AtomicI64::new(0),
                floor: AtomicI64::new(0),
            }),
        }
    }
}

// SAFETY: atomics only, no pointers: valid in every process at any address.
unsafe impl PGRXSharedMemory for FenceClock {}

// SAFETY: a unique shared-memory name, initialised once with pg_shmem_init! in _PG_init.
static CLOCK: PgAtomic<FenceClock> = unsafe { PgAtomic::new(c"pg_idem fence clock") };

/// Requests the shared memory. Only valid from `_PG_init` during shared_preload_libraries.
pub fn init_shared_memory() {
    pg_shmem_init!(CLOCK);
}

/// The next fence of the database whose fence sequence is `sequence`: above every fence handed
/// out before, and above `replaced`, the fence of the row the new attempt replaces (a row of an
/// earlier server lifetime, or restored from a dump, may hold a fence the counter has not seen).
pub fn next(sequence: pg_sys::Oid, replaced: Option<i64>) -> i64 {
    let at_least = replaced.map_or(0, |fence| fence.saturating_add(1));
    if !preload::active() {
        return from_sequence(sequence).max(at_least);
    }
    let clock_state = CLOCK.get();
    let slot = slot_of(clock_state);
    if slot.sequence.load(Ordering::Acquire) != sequence.to_u32()
        || slot.lifted.load(Ordering::Acquire) == 0
    {
        with_floor_lock(|| lift(clock_state, slot, sequence));
    }
    // above every fence of earlier lifetimes, whatever this lifetime's counter says
    let at_least = at_least.max(slot.lifted.load(Ordering::Acquire) + 1);
    let fence = draw(clock_state, at_least);
    if fence > slot.floor.load(Ordering::Acquire) {
        with_floor_lock(|| raise(slot, sequence, fence));
    }
    fence
}

/// A fence written to idem.keys by something other than pg_idem's own writes (a restore's
/// COPY or INSERT, a row written by hand, a logical replica's apply), seen by the trigger
/// `lift_fence_clock`: the counter goes up to it, so every fence drawn once that write is
/// committed is above it (the draw then raises the floor above itself, as always). Without
/// this, a server that handed out fences before a restore would draw below restored fences
/// that its clock has not reached yet (a source whose floor or clock was ahead) until its next
/// start. A load and a compare when the counter is there already, as for pg_idem's own writes
/// through SPI; without shared memory fences come from the sequence, which a restore sets.
pub fn seen(fence: i64) {
    if !preload::active() {
        return;
    }
    let clock_state = CLOCK.get();
    if fence > clock_state.last.load(Ordering::Acquire) {
        clock_state.last.fetch_max(fence, Ordering::AcqRel);
    }
}

/// max(last + 1, clock, at_least), stored as the new last: one compare-and-swap.
fn draw(state: &FenceClock, at_least: i64) -> i64 {
    let now = clock();
    let mut last = state.last.load(Ordering::Relaxed);
    loop {
        let fence = last.saturating_add(1).max(now).max(at_least);
        match state
            .last
            .compare_exchange_weak(last, fence, Ordering::AcqRel, Ordering::Relaxed)
        {
            Ok(_) => return fence,
            Err(seen) => last = seen,
        }
    }
}

/// The slot of this database, taken on first use; when every slot is taken, the slots of
/// databases that no longer exist are freed first.
fn slot_of(state: &FenceClock) -> &Slot {
    // SAFETY: MyDatabaseId is set once the backend is connected, before any SQL runs.
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let start = (database as usize).wrapping_mul(2_654_435_761) % SLOTS;
    for pass in 0..2 {
        for probe in 0..SLOTS {
            let slot = &state.slots[(start + probe) % SLOTS];
            match slot
                .database
                .compare_exchange(0, database, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return slot,
                Err(seen) if seen == database => return slot,
                Err(_) => {}
            }
        }
        if pass == 0 {
            free_slots_of_dropped_databases(state);
        }
    }
    errors::too_many_fence_databases(SLOTS).raise()
}

/// Frees the slots of databases that were dropped: no backend can be connected to one, so
/// none is using its slot.
fn free_slots_of_dropped_databases(state: &FenceClock) {
    for slot in &state.slots {
        let database = slot.database.load(Ordering::Acquire);
        if database == 0 {
            continue;
        }
        // SAFETY: a syscache probe of pg_database (a shared catalog) inside a transaction.
        let exists = unsafe {
            pg_sys::SearchSysCacheExists(
                pg_sys::SysCacheIdentifier::DATABASEOID as i32,
                pg_sys::Datum::from(database),
                pg_sys::Datum::from(0),
                pg_sys::Datum::from(0),
                pg_sys::Datum::from(0),
            )
        };
        if !exists {
            slot.forget();
            let _ =
                slot.database
                    .compare_exchange(database, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// First use of this database's sequence in this server lifetime (or of a new sequence, after
/// the extension was created again): the counter goes above the sequence's value, which is at
/// least every fence handed out before (they were all covered by a flushed floor). The caller
/// holds the floor lock.
fn lift(state: &FenceClock, slot: &Slot, sequence: pg_sys::Oid) {
    if slot.sequence.load(Ordering::Acquire) == sequence.to_u32()
        && slot.lifted.load(Ordering::Acquire) != 0
    {
        return;
    }
    let value = owner::as_extension_owner(|| sequence_value(sequence));
    state.last.fetch_max(value, Ordering::AcqRel);
    slot.floor.store(value, Ordering::Release);
    slot.lifted.store(value.max(1), Ordering::Release);
    slot.sequence.store(sequence.to_u32(), Ordering::Release);
}

/// Makes the floor at least `fence`, flushed: another backend may have raised it already (then
/// this one only learns it), else it is raised to a minute of clock above `fence`. The caller
/// holds the floor lock, so a value read here was flushed by whoever wrote it.
fn raise(slot: &Slot, sequence: pg_sys::Oid, fence: i64) {
    if slot.sequence.load(Ordering::Acquire) == sequence.to_u32()
        && slot.floor.load(Ordering::Acquire) >= fence
    {
        return;
    }
    let floor = owner::as_extension_owner(|| {
        let current = sequence_value(sequence);
        if current >= fence {
            return current;
        }
        let floor = fence.saturating_add(FLOOR_AHEAD);
        set_sequence(sequence, floor);
        // SAFETY: XactLastRecEnd is the end of the WAL record setval just wrote; flushing up to
        // it makes the floor survive a crash before the fence is used.
        unsafe { pg_sys::XLogFlush(pg_sys::XactLastRecEnd) };
        floor
    });
    if slot.sequence.load(Ordering::Acquire) == sequence.to_u32() {
        slot.floor.fetch_max(floor, Ordering::AcqRel);
    }
}

/// Runs `f` holding this database's floor lock, a transaction-level advisory lock in its own
/// space, released as soon as `f` returns: the floor is raised by one backend at a time. The
/// wait is interruptible and deadlock-checked (it is a heavyweight lock, and `f` waits for
/// nothing a claim could hold).
fn with_floor_lock<R>(f: impl FnOnce() -> R) -> R {
    let lock = Lock::fence_floor();
    let taken = lock.take();
    let result = f();
    lock.release(taken);
    result
}

/// The sequence's last value, 0 when nothing was drawn from it yet. Called as the owner.
fn sequence_value(sequence: pg_sys::Oid) -> i64 {
    // SAFETY: pg_sequence_last_value takes a sequence's regclass; NULL when it was never called.
    unsafe {
        pgrx::direct_function_call::<i64>(pg_sys::pg_sequence_last_value, &[sequence.into_datum()])
    }
    .unwrap_or(0)
}

/// setval(sequence, value). Called as the owner.
fn set_sequence(sequence: pg_sys::Oid, value: i64) {
    // SAFETY: setval_oid takes a sequence's regclass and a bigint; it checks privileges (the
    // owner's) and raises if the value is out of the sequence's range.
    unsafe {
        pgrx::direct_function_call::<i64>(
            pg_sys::setval_oid,
            &[sequence.into_datum(), value.into_datum()],
        )
    };
}

/// Without shared memory: nextval, its WAL flushed when it wrote some.
fn from_sequence(sequence: pg_sys::Oid) -> i64 {
    owner::as_extension_owner(|| {
        // SAFETY: plain reads of this backend's position in the WAL it wrote.
        let before = unsafe { pg_sys::XactLastRecEnd };
        // SAFETY: nextval_oid takes a sequence's regclass; it checks privileges (the owner's).
        let fence = unsafe {
            pgrx::direct_function_call::<i64>(pg_sys::nextval_oid, &[sequence.into_datum()])
        }
        .unwrap_or_else(|| errors::internal("drawing a fence", "NULL result").raise());
        // SAFETY: as above; XLogFlush flushes the record nextval just wrote (it logs ahead).
        unsafe {
            if pg_sys::XactLastRecEnd != before {
                pg_sys::XLogFlush(pg_sys::XactLastRecEnd);
            }
        }
        fence
    })
}
