//! Cumulative counters since server start, kept in shared memory when pg_idem is preloaded.
//! Without the preload there is no shared memory to keep them in: recording is a no-op and the
//! SQL functions report NULL counters.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic};

/// What the counters count.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    /// A claim answered `claimed` (takeovers included).
    Claimed,
    /// A claim took over an attempt whose lease had passed.
    Takeover,
    ReplayCompleted,
    ReplayFailed,
    InProgress,
    Mismatch,
    StaleKey,
    /// An operation under a fence was refused with 55000.
    StaleFence,
}

const EVENT_COUNT: usize = 8;

#[derive(Default)]
pub struct Counters {
    events: [AtomicU64; EVENT_COUNT],
    purged: AtomicU64,
    /// TimestampTz of the last reset (0: since server start).
    reset_at: AtomicI64,
}

unsafe impl PGRXSharedMemory for Counters {}

static COUNTERS: PgAtomic<Counters> = unsafe { PgAtomic::new(c"pg_idem counters") };

/// Set in the postmaster when the library is preloaded; forked backends inherit it.
static SHARED: AtomicBool = AtomicBool::new(false);

/// Requests the shared memory. Only valid from `_PG_init` during shared_preload_libraries.
pub fn init_shared_memory() {
    pg_shmem_init!(COUNTERS);
    SHARED.store(true, Ordering::Relaxed);
}

/// True when the counters live in shared memory (pg_idem is in shared_preload_libraries).
pub fn available() -> bool {
    SHARED.load(Ordering::Relaxed)
}

pub fn record(event: Event) {
    if available() {
        COUNTERS.get().events[event as usize].fetch_add(1, Ordering::Relaxed);
    }
}

pub fn record_purged(keys: i64) {
    if available() && keys > 0 {
        COUNTERS
            .get()
            .purged
            .fetch_add(keys as u64, Ordering::Relaxed);
    }
}

/// A consistent-enough copy of the counters (each counter is read atomically).
pub struct Snapshot {
    pub events: [u64; EVENT_COUNT],
    pub purged: u64,
    pub reset_at: i64,
}

impl Snapshot {
    pub fn get(&self, event: Event) -> u64 {
        self.events[event as usize]
    }
}

pub fn snapshot() -> Option<Snapshot> {
    if !available() {
        return None;
    }
    let counters = COUNTERS.get();
    Some(Snapshot {
        events: std::array::from_fn(|i| counters.events[i].load(Ordering::Relaxed)),
        purged: counters.purged.load(Ordering::Relaxed),
        reset_at: counters.reset_at.load(Ordering::Relaxed),
    })
}

pub fn reset(now: i64) {
    if available() {
        let counters = COUNTERS.get();
        for counter in &counters.events {
            counter.store(0, Ordering::Relaxed);
        }
        counters.purged.store(0, Ordering::Relaxed);
        counters.reset_at.store(now, Ordering::Relaxed);
    }
}

/// `idem_purge_status()`: one row per database in pg_idem.database, empty without the preload.
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn idem_purge_status() -> TableIterator<
    'static,
    (
        name!(database, String),
        name!(pid, Option<i32>),
        name!(state, String),
        name!(started_at, Option<TimestampWithTimeZone>),
        name!(starts, i64),
        name!(last_pass_at, Option<TimestampWithTimeZone>),
        name!(last_pass_keys, Option<i64>),
        name!(last_pass_batches, Option<i64>),
        name!(last_pass_ms, Option<i64>),
        name!(total_keys, i64),
        name!(total_passes, i64),
        name!(total_batches, i64),
    ),
> {
    let slots = crate::worker::slots().unwrap_or_default();
    let ts = |micros: i64| (micros != 0).then(|| crate::api::timestamptz(micros));
    TableIterator::new(slots.into_iter().map(move |s| {
        let passed = s.total_passes > 0;
        (
            s.database().to_string(),
            (s.pid != 0).then_some(s.pid),
            s.state().name().to_string(),
            ts(s.started_at),
            s.starts,
            ts(s.last_pass_at),
            passed.then_some(s.last_pass_keys),
            passed.then_some(s.last_pass_batches),
            passed.then_some(s.last_pass_ms),
            s.total_keys,
            s.total_passes,
            s.total_batches,
        )
    }))
}
