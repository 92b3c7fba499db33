//! Cumulative counters since server start, kept in shared memory when pg_idem is preloaded, in
//! total and per tenant (for up to TENANT_SLOTS tenants; later tenants share one "other" row).
//! Without the preload there is no shared memory to keep them in: recording is a no-op and the
//! SQL functions report NULL counters.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use pgrx::prelude::*;

use crate::enum_list::enum_list;
use pgrx::{pg_shmem_init, PGRXSharedMemory, PgAtomic, PgLwLock};

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
}
}

const EVENT_COUNT: usize = Event::ALL.len();

/// Tenants with counters of their own; the rest are counted together.
pub const TENANT_SLOTS: usize = 1024;

/// Bytes of a tenant's name kept for display; longer names are cut (but told apart by hash).
const TENANT_NAME_BYTES: usize = 64;

#[derive(Default)]
pub struct Counters {
    events: [AtomicU64; EVENT_COUNT],
    purged: AtomicU64,
    /// TimestampTz of the last reset (0: since server start).
    reset_at: AtomicI64,
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

fn record_for_tenant(tenant: &str, event: Event) {
    let hash = tenant_hash(tenant);
    {
        let table = TENANTS.share();
        match find_slot(&table, hash) {
            Ok(i) => {
                table.slots[i].events[event as usize].fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(None) => {
                table.other[event as usize].fetch_add(1, Ordering::Relaxed);
                return;
            }
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
        Err(None) => {
            table.other[event as usize].fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    table.slots[i].events[event as usize].fetch_add(1, Ordering::Relaxed);
}

/// True when the counters live in shared memory (pg_idem is in shared_preload_libraries).
pub fn available() -> bool {
    crate::preload::active()
}

pub fn record(tenant: &str, event: Event) {
    if available() {
        COUNTERS.get().events[event as usize].fetch_add(1, Ordering::Relaxed);
        record_for_tenant(tenant, event);
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

fn reset(now: i64) {
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

/// Per-tenant counters: (tenant, counters); the tenants past TENANT_SLOTS as one NULL tenant.
fn tenant_snapshot() -> Vec<(Option<String>, [u64; EVENT_COUNT])> {
    if !available() {
        return Vec::new();
    }
    let table = TENANTS.share();
    let load = |events: &[AtomicU64; EVENT_COUNT]| {
        std::array::from_fn(|i| events[i].load(Ordering::Relaxed))
    };
    let mut rows: Vec<(Option<String>, [u64; EVENT_COUNT])> = table
        .slots
        .iter()
        .filter(|s| s.hash.load(Ordering::Relaxed) != 0)
        .map(|s| {
            (
                Some(String::from_utf8_lossy(&s.name[..s.name_len as usize]).into_owned()),
                load(&s.events),
            )
        })
        .collect();
    let other = load(&table.other);
    if other.iter().any(|&n| n > 0) {
        rows.push((None, other));
    }
    rows
}

fn counter(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

type CounterRow = (
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

fn counter_row(events: Option<&[u64; EVENT_COUNT]>) -> CounterRow {
    let get = |e: Event| events.map(|ev| counter(ev[e as usize]));
    (
        get(Event::Claimed),
        get(Event::ReplayCompleted),
        get(Event::ReplayFailed),
        get(Event::InProgress),
        get(Event::Mismatch),
        get(Event::Takeover),
        get(Event::StaleFence),
        get(Event::StaleKey),
    )
}

/// `idem_counters()`: the cumulative counters, NULL without the preload.
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn idem_counters() -> TableIterator<
    'static,
    (
        name!(claims, Option<i64>),
        name!(replays_completed, Option<i64>),
        name!(replays_failed, Option<i64>),
        name!(in_progress, Option<i64>),
        name!(mismatches, Option<i64>),
        name!(takeovers, Option<i64>),
        name!(stale_fences, Option<i64>),
        name!(stale_keys, Option<i64>),
        name!(keys_purged, Option<i64>),
        name!(since, Option<TimestampWithTimeZone>),
    ),
> {
    let snap = snapshot();
    let c = counter_row(snap.as_ref().map(|s| &s.events));
    let purged = snap.as_ref().map(|s| counter(s.purged));
    let since = snap.as_ref().map(|s| {
        crate::time::timestamptz(if s.reset_at != 0 {
            s.reset_at
        } else {
            // SAFETY: set by the postmaster at start, inherited read-only by every backend.
            unsafe { pg_sys::PgStartTime }
        })
    });
    TableIterator::once((c.0, c.1, c.2, c.3, c.4, c.5, c.6, c.7, purged, since))
}

/// `idem_tenant_counters()`: the cumulative counters per tenant.
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn idem_tenant_counters() -> TableIterator<
    'static,
    (
        name!(tenant, Option<String>),
        name!(claims, Option<i64>),
        name!(replays_completed, Option<i64>),
        name!(replays_failed, Option<i64>),
        name!(in_progress, Option<i64>),
        name!(mismatches, Option<i64>),
        name!(takeovers, Option<i64>),
        name!(stale_fences, Option<i64>),
        name!(stale_keys, Option<i64>),
    ),
> {
    TableIterator::new(tenant_snapshot().into_iter().map(|(tenant, events)| {
        let c = counter_row(Some(&events));
        (tenant, c.0, c.1, c.2, c.3, c.4, c.5, c.6, c.7)
    }))
}

/// `idem_stats_reset()`: zeroes every counter; returns false without the preload.
#[pg_extern(sql = false)]
fn idem_stats_reset() -> bool {
    reset(crate::time::clock());
    available()
}

/// In-server tests: each runs inside one transaction that is rolled back afterwards; what needs
/// several sessions is tested through real client connections in tests/.
#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[allow(unused_imports)]
    use crate::testing::*;

    #[pg_test]
    fn counters_count_outcomes() {
        // tests run side by side in one server: look at this test's own tenant only
        let counts = || {
            Spi::get_three::<i64, i64, i64>(
                "SELECT sum(claims)::bigint, sum(in_progress)::bigint, sum(mismatches)::bigint \
                 FROM idem_tenant_counters() WHERE tenant = 'counters_count_outcomes'",
            )
            .unwrap()
        };
        let before = counts();
        claim3("counters_count_outcomes", "k", "h");
        claim3("counters_count_outcomes", "k", "h");
        claim3("counters_count_outcomes", "k", "x");
        let after = counts();
        let delta = |a: Option<i64>, b: Option<i64>| a.unwrap_or(0) - b.unwrap_or(0);
        assert_eq!(
            (
                delta(after.0, before.0),
                delta(after.1, before.1),
                delta(after.2, before.2)
            ),
            (1, 1, 1)
        );
        assert_eq!(
            one_i64("SELECT keys_in_progress FROM idem_tenant_stats() WHERE tenant = 'counters_count_outcomes'"),
            Some(1)
        );
    }
}
