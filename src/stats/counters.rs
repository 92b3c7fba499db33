//! The counters themselves: cumulative counts of events since server start, kept in shared
//! memory when pg_idem is preloaded, in total and per tenant (for up to TENANT_SLOTS tenants;
//! later tenants share one "other" row). Without the preload there is no shared memory to keep
//! them in: recording is a no-op and reading finds nothing. No SQL here.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use pgrx::prelude::*;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic, PgLwLock};

use crate::enum_list::enum_list;
use crate::pg::time::Micros;

enum_list! {
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
    /// idem_consume (or idem_consume_many) found a message new and recorded it.
    Consumed,
    /// idem_consume (or idem_consume_many) found a message processed already.
    ConsumeDuplicate,
}
}

const EVENT_COUNT: usize = Event::ALL.len();

/// Tenants with counters of their own; the rest are counted together.
pub const TENANT_SLOTS: usize = 1024;

/// Bytes of a tenant's name kept for display; longer names are cut (but told apart by hash).
const TENANT_NAME_BYTES: usize = 64;

pub struct Counters {
    events: [AtomicU64; EVENT_COUNT],
    purged: AtomicU64,
    /// TimestampTz since which the counters count: when this shared memory was set up (the
    /// server's start, or its restart after a crash, which the postmaster's start time does not
    /// show), or the last reset.
    reset_at: AtomicI64,
}

impl Default for Counters {
    /// Run by the postmaster when it sets up shared memory: at start and after a crash.
    fn default() -> Self {
        Counters {
            events: Default::default(),
            purged: AtomicU64::new(0),
            // SAFETY: reads the system clock; callable in any process, the postmaster included.
            reset_at: AtomicI64::new(unsafe { pg_sys::GetCurrentTimestamp() }),
        }
    }
}

// SAFETY: plain integers and timestamps, no pointers: valid in any process at any address.
unsafe impl PGRXSharedMemory for Counters {}

// SAFETY: a unique shared-memory name, initialised once with pg_shmem_init! in _PG_init.
static COUNTERS: PgAtomic<Counters> = unsafe { PgAtomic::new(c"pg_idem counters") };

struct TenantSlot {
    /// 0: free; otherwise a hash of the tenant's full name (never 0)
    hash: AtomicU64,
    name_len: u8,
    name: [u8; TENANT_NAME_BYTES],
    events: [AtomicU64; EVENT_COUNT],
}

/// Open addressing on the tenant's hash; slots are claimed under the exclusive lock and never
/// freed (a reset zeroes the counters but keeps the tenants).
pub struct TenantTable {
    slots: [TenantSlot; TENANT_SLOTS],
    other: [AtomicU64; EVENT_COUNT],
}

impl Default for TenantTable {
    fn default() -> Self {
        TenantTable {
            slots: std::array::from_fn(|_| TenantSlot {
                hash: AtomicU64::new(0),
                name_len: 0,
                name: [0; TENANT_NAME_BYTES],
                events: Default::default(),
            }),
            other: Default::default(),
        }
    }
}

// SAFETY: fixed-size arrays of bytes and integers, no pointers.
unsafe impl PGRXSharedMemory for TenantTable {}

// SAFETY: a unique shared-memory name, initialised once with pg_shmem_init! in _PG_init.
static TENANTS: PgLwLock<TenantTable> = unsafe { PgLwLock::new(c"pg_idem tenant counters") };

/// Requests the shared memory. Only valid from `_PG_init` during shared_preload_libraries.
pub fn init_shared_memory() {
    pg_shmem_init!(COUNTERS);
    pg_shmem_init!(TENANTS);
}

fn tenant_hash(tenant: &str) -> u64 {
    // FNV-1a; 0 marks a free slot
    let hash = tenant.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    hash.max(1)
}

fn find_slot(table: &TenantTable, hash: u64) -> Result<usize, Option<usize>> {
    let start = (hash % TENANT_SLOTS as u64) as usize;
    for probe in 0..TENANT_SLOTS {
        let i = (start + probe) % TENANT_SLOTS;
        match table.slots[i].hash.load(Ordering::Relaxed) {
            h if h == hash => return Ok(i),
            0 => return Err(Some(i)),
            _ => {}
        }
    }
    Err(None)
}

/// Adds `counts` (by event) to the tenant's slot: one look-up of the slot for them all.
fn record_for_tenant(tenant: &str, counts: &[u64; EVENT_COUNT]) {
    let add = |events: &[AtomicU64; EVENT_COUNT]| {
        for (counter, &n) in events.iter().zip(counts) {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
    };
    let hash = tenant_hash(tenant);
    {
        let table = TENANTS.share();
        match find_slot(&table, hash) {
            Ok(i) => return add(&table.slots[i].events),
            Err(None) => return add(&table.other),
            Err(Some(_)) => {}
        }
    }
    // a tenant not seen before: claim a slot (someone may have done so since we looked)
    let mut table = TENANTS.exclusive();
    let i = match find_slot(&table, hash) {
        Ok(i) => i,
        Err(Some(i)) => {
            let slot = &mut table.slots[i];
            let len = tenant.len().min(TENANT_NAME_BYTES);
            slot.name[..len].copy_from_slice(&tenant.as_bytes()[..len]);
            slot.name_len = len as u8;
            slot.hash.store(hash, Ordering::Relaxed);
            i
        }
        Err(None) => return add(&table.other),
    };
    add(&table.slots[i].events);
}

/// True when the counters live in shared memory (pg_idem is in shared_preload_libraries).
pub fn available() -> bool {
    crate::pg::preload::active()
}

/// Events of one call, counted as they happen and recorded together at its end: a batch of
/// keys touches the shared counters (and looks up its tenant's slot) once, not once per key,
/// which 8 clients consuming batches would otherwise contend on.
#[derive(Default)]
pub struct Tally([u64; EVENT_COUNT]);

impl Tally {
    pub fn add(&mut self, event: Event) {
        self.0[event as usize] += 1;
    }

    /// Adds the events to the totals and to `tenant`'s counters.
    pub fn record(&self, tenant: &str) {
        if !available() || self.0.iter().all(|&n| n == 0) {
            return;
        }
        let totals = &COUNTERS.get().events;
        for (counter, &n) in totals.iter().zip(&self.0) {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
        record_for_tenant(tenant, &self.0);
    }
}

pub fn record(tenant: &str, event: Event) {
    let mut tally = Tally::default();
    tally.add(event);
    tally.record(tenant);
}

pub fn record_purged(keys: i64) {
    if available() && keys > 0 {
        COUNTERS
            .get()
            .purged
            .fetch_add(keys as u64, Ordering::Relaxed);
    }
}

/// How many times each event happened, as read from shared memory.
#[derive(Clone, Copy)]
pub struct EventCounts([u64; EVENT_COUNT]);

impl EventCounts {
    /// Reads each counter atomically (the set as a whole may be mid-update: consistent enough).
    fn load(events: &[AtomicU64; EVENT_COUNT]) -> EventCounts {
        EventCounts(std::array::from_fn(|i| events[i].load(Ordering::Relaxed)))
    }

    pub fn get(&self, event: Event) -> u64 {
        self.0[event as usize]
    }

    fn any(&self) -> bool {
        self.0.iter().any(|&n| n > 0)
    }
}

/// A consistent-enough copy of the counters (each counter is read atomically).
pub struct Snapshot {
    pub events: EventCounts,
    pub purged: u64,
    pub reset_at: Micros,
}

/// The counters in total; None without the preload.
pub fn snapshot() -> Option<Snapshot> {
    if !available() {
        return None;
    }
    let counters = COUNTERS.get();
    Some(Snapshot {
        events: EventCounts::load(&counters.events),
        purged: counters.purged.load(Ordering::Relaxed),
        reset_at: counters.reset_at.load(Ordering::Relaxed),
    })
}

/// One tenant's counters; `tenant` is None for the tenants past TENANT_SLOTS, counted together.
pub struct TenantEvents {
    pub tenant: Option<String>,
    pub events: EventCounts,
}

/// The counters per tenant (empty without the preload); the tenants past TENANT_SLOTS as one
/// row with no tenant, if any of them counted anything.
pub fn tenant_snapshot() -> Vec<TenantEvents> {
    if !available() {
        return Vec::new();
    }
    let table = TENANTS.share();
    let mut rows: Vec<TenantEvents> = table
        .slots
        .iter()
        .filter(|s| s.hash.load(Ordering::Relaxed) != 0)
        .map(|s| TenantEvents {
            tenant: Some(String::from_utf8_lossy(&s.name[..s.name_len as usize]).into_owned()),
            events: EventCounts::load(&s.events),
        })
        .collect();
    let other = EventCounts::load(&table.other);
    if other.any() {
        rows.push(TenantEvents {
            tenant: None,
            events: other,
        });
    }
    rows
}

/// Zeroes every counter (the tenants keep their slots) and counts from `now`; nothing without
/// the preload.
pub fn reset(now: Micros) {
    if available() {
        let counters = COUNTERS.get();
        for counter in &counters.events {
            counter.store(0, Ordering::Relaxed);
        }
        counters.purged.store(0, Ordering::Relaxed);
        counters.reset_at.store(now, Ordering::Relaxed);
        let table = TENANTS.share();
        for counter in table
            .slots
            .iter()
            .flat_map(|s| s.events.iter())
            .chain(table.other.iter())
        {
            counter.store(0, Ordering::Relaxed);
        }
    }
}
