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
//! whichever claim crosses it. After a crash or a restart, the first fence a database draws is
//! above its floor (the counter is lifted to it), so it exceeds every fence handed out before,
//! whatever the clock says. idem.fence_seq is WAL-logged, so it reaches standbys, pg_dump and
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

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic};

use crate::errors;
use crate::owner;
use crate::preload;
use crate::time::{clock, Micros};

/// How far ahead of the fence that crossed it the floor is raised: a minute of clock.
const FLOOR_AHEAD: Micros = 60 * 1_000_000;

/// (database, sequence) pairs one server lifetime can draw fences for.
const SLOTS: usize = 4096;

/// objsubid of the advisory lock that serialises raising one database's floor (pg_locks).
const FLOOR_LOCK_SPACE: u16 = 0x1df;

/// The floor of one database's fence sequence, as this server lifetime knows it.
struct Slot {
    /// database OID << 32 | sequence OID; 0 while the slot is free. Taken once, never freed.
    owner: AtomicU64,
    /// The sequence's value when this lifetime first drew from it (at least 1 once set): every
    /// fence handed out before is at most this. 0 until then.
    lifted: AtomicI64,
    /// Fences up to this are covered by the sequence, flushed.
    floor: AtomicI64,
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
                owner: AtomicU64::new(0),
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

/// The next fence of the database whose fence sequence is `sequence`, at least `at_least`.
pub fn next(sequence: pg_sys::Oid, at_least: i64) -> i64 {
    if !preload::active() {
        return from_sequence(sequence).max(at_least);
    }
    let clock_state = CLOCK.get();
    let slot = slot_of(clock_state, sequence);
    if slot.lifted.load(Ordering::Acquire) == 0 {
        with_floor_lock(sequence, || lift(clock_state, slot, sequence));
    }
    // above every fence of earlier lifetimes, whatever this lifetime's counter says
    let at_least = at_least.max(slot.lifted.load(Ordering::Acquire) + 1);
    let fence = draw(clock_state, at_least);
    if fence > slot.floor.load(Ordering::Acquire) {
        with_floor_lock(sequence, || raise(slot, sequence, fence));
    }
    fence
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

/// The slot of this database's sequence, taken on first use.
fn slot_of(state: &FenceClock, sequence: pg_sys::Oid) -> &Slot {
    // SAFETY: MyDatabaseId is set once the backend is connected, before any SQL runs.
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let owner = u64::from(database) << 32 | u64::from(sequence.to_u32());
    let start = (owner % SLOTS as u64) as usize;
    for probe in 0..SLOTS {
        let slot = &state.slots[(start + probe) % SLOTS];
        match slot
            .owner
            .compare_exchange(0, owner, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return slot,
            Err(seen) if seen == owner => return slot,
            Err(_) => {}
        }
    }
    errors::too_many_fence_sequences(SLOTS).raise()
}

/// First use in this server lifetime: the counter goes above the sequence's value, which is at
/// least every fence handed out before (they were all covered by a flushed floor).
fn lift(state: &FenceClock, slot: &Slot, sequence: pg_sys::Oid) {
    if slot.lifted.load(Ordering::Acquire) != 0 {
        return;
    }
    let value = owner::as_extension_owner(|| sequence_value(sequence));
    state.last.fetch_max(value, Ordering::AcqRel);
    slot.floor.store(value, Ordering::Release);
    slot.lifted.store(value.max(1), Ordering::Release);
}

/// Raises the floor to a minute of clock above `fence`, flushed, unless another backend did.
fn raise(slot: &Slot, sequence: pg_sys::Oid, fence: i64) {
    if slot.floor.load(Ordering::Acquire) >= fence {
        return;
    }
    let floor = owner::as_extension_owner(|| {
        let floor = sequence_value(sequence).max(fence.saturating_add(FLOOR_AHEAD));
        set_sequence(sequence, floor);
        // SAFETY: XactLastRecEnd is the end of the WAL record setval just wrote; flushing up to
        // it makes the floor survive a crash before the fence is used.
        unsafe { pg_sys::XLogFlush(pg_sys::XactLastRecEnd) };
        floor
    });
    slot.floor.store(floor, Ordering::Release);
}

/// Runs `f` holding this database's floor lock, a transaction-level advisory lock in its own
/// space, released as soon as `f` returns: the floor is raised by one backend at a time. The
/// wait is interruptible and deadlock-checked (it is a heavyweight lock, and `f` waits for
/// nothing a claim could hold).
fn with_floor_lock(sequence: pg_sys::Oid, f: impl FnOnce()) {
    let tag = pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set once the backend is connected, before any SQL runs.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: sequence.to_u32(),
        locktag_field3: 0,
        locktag_field4: FLOOR_LOCK_SPACE,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    };
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: a valid advisory lock tag; waiting is interruptible and deadlock-checked.
    let taken = unsafe { pg_sys::LockAcquire(&tag, mode, false, false) };
    f();
    if taken != pg_sys::LockAcquireResult::LOCKACQUIRE_ALREADY_HELD {
        // SAFETY: releases the lock taken just above, same tag and mode.
        unsafe { pg_sys::LockRelease(&tag, mode, false) };
    }
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
