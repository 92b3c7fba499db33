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

/// The event counters as SQL shows them, in the order of their columns in idem_counters() and
/// idem_tenant_counters() (sql/stats.sql): the column's name, and what it counts. The names are
/// also the keys of the JSON each node of a Citus cluster answers with (`cluster_totals`).
const COUNTER_COLUMNS: [(&str, Event); EVENT_COUNT] = [
    ("claims", Event::Claimed),
    ("replays_completed", Event::ReplayCompleted),
    ("replays_failed", Event::ReplayFailed),
    ("in_progress", Event::InProgress),
    ("mismatches", Event::Mismatch),
    ("takeovers", Event::Takeover),
    ("stale_fences", Event::StaleFence),
    ("stale_keys", Event::StaleKey),
    ("consumed", Event::Consumed),
    ("consume_duplicates", Event::ConsumeDuplicate),
];

/// Counter values in COUNTER_COLUMNS order; None for SQL NULL (no counters).
type Values = [Option<i64>; EVENT_COUNT];

fn values(events: Option<&[u64; EVENT_COUNT]>) -> Values {
    COUNTER_COLUMNS.map(|(_, e)| events.map(|ev| counter(ev[e as usize])))
}

/// This server's counters, and when they started (its start, or the last reset).
fn local_totals() -> (Values, Option<i64>, Option<TimestampWithTimeZone>) {
    let snap = snapshot();
    let since = snap.as_ref().map(|s| {
        crate::time::timestamptz(if s.reset_at != 0 {
            s.reset_at
        } else {
            // SAFETY: set by the postmaster at start, inherited read-only by every backend.
            unsafe { pg_sys::PgStartTime }
        })
    });
    (
        values(snap.as_ref().map(|s| &s.events)),
        snap.as_ref().map(|s| counter(s.purged)),
        since,
    )
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
    Option<i64>,
    Option<i64>,
);

fn row(v: Values) -> CounterRow {
    (v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9])
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
        name!(consumed, Option<i64>),
        name!(consume_duplicates, Option<i64>),
    ),
> {
    let (v, purged, since) = local_totals();
    let c = row(v);
    TableIterator::once((
        c.0, c.1, c.2, c.3, c.4, c.5, c.6, c.7, purged, since, c.8, c.9,
    ))
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
        name!(consumed, Option<i64>),
        name!(consume_duplicates, Option<i64>),
    ),
> {
    TableIterator::new(tenant_snapshot().into_iter().map(|(tenant, events)| {
        let c = row(values(Some(&events)));
        (tenant, c.0, c.1, c.2, c.3, c.4, c.5, c.6, c.7, c.8, c.9)
    }))
}

// ---------------------------------------------------------------------------------------------
// Cluster-wide totals, for idem_stats() and idem_tenant_stats()
// ---------------------------------------------------------------------------------------------

/// Adds a node's value to a total; a node without counters (NULL) adds nothing.
fn add(total: &mut Option<i64>, value: Option<i64>) {
    if let Some(v) = value {
        *total = Some(total.unwrap_or(0).saturating_add(v));
    }
}

/// The counters of one node's JSON row (idem_counters() or idem_tenant_counters() there).
fn values_of_json(row: &serde_json::Value) -> Values {
    COUNTER_COLUMNS.map(|(name, _)| row.get(name).and_then(serde_json::Value::as_i64))
}

/// Seconds since 1970 as PostgreSQL's TimestampTz (microseconds since 2000).
fn from_unix_seconds(seconds: f64) -> Option<TimestampWithTimeZone> {
    const UNIX_TO_PG_EPOCH_S: f64 = 946_684_800.0;
    let micros = ((seconds - UNIX_TO_PG_EPOCH_S) * 1_000_000.0).round();
    micros
        .is_finite()
        .then(|| crate::time::timestamptz(micros as i64))
}

/// The counters for idem_stats(): this server's, or, on a Citus coordinator of a distributed
/// idem.keys, the sum over every node that answered (each node counts what ran there, and
/// delegated calls run on the workers); with how many nodes were summed, which did not answer,
/// and since when every summed node has been counting (the latest start or reset among them).
fn totals() -> (
    Values,
    Option<i64>,
    Option<TimestampWithTimeZone>,
    i32,
    Vec<String>,
) {
    if !crate::cluster::coordinator_of_distributed_keys() {
        let (v, purged, since) = local_totals();
        let nodes = i32::from(since.is_some());
        return (v, purged, since, nodes, Vec::new());
    }
    let mut total: Values = [None; EVENT_COUNT];
    let (mut purged, mut since, mut nodes, mut missing) = (None, None::<f64>, 0, Vec::new());
    let command = "SELECT pg_catalog.row_to_json(c) FROM (SELECT x.*, \
         pg_catalog.date_part('epoch', x.since) AS since_epoch FROM %I.idem_counters() AS x) AS c";
    for answer in crate::cluster::on_every_node(command) {
        let parsed = answer
            .result
            .and_then(|r| serde_json::from_str::<serde_json::Value>(&r).ok())
            .filter(|row| row.get("claims").is_some_and(|c| !c.is_null()));
        let Some(row) = parsed else {
            missing.push(answer.node);
            continue;
        };
        for (t, v) in total.iter_mut().zip(values_of_json(&row)) {
            add(t, v);
        }
        add(
            &mut purged,
            row.get("keys_purged").and_then(serde_json::Value::as_i64),
        );
        if let Some(s) = row.get("since_epoch").and_then(serde_json::Value::as_f64) {
            since = Some(since.map_or(s, |t| t.max(s)));
        }
        nodes += 1;
    }
    (
        total,
        purged,
        since.and_then(from_unix_seconds),
        nodes,
        missing,
    )
}

/// `idem.counter_totals()`: the counters idem_stats() shows (see `totals`).
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn idem_counter_totals() -> TableIterator<
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
        name!(consumed, Option<i64>),
        name!(consume_duplicates, Option<i64>),
        name!(keys_purged, Option<i64>),
        name!(since, Option<TimestampWithTimeZone>),
        name!(nodes, i32),
        name!(missing_nodes, Vec<String>),
    ),
> {
    let (v, purged, since, nodes, missing) = totals();
    let c = row(v);
    TableIterator::once((
        c.0, c.1, c.2, c.3, c.4, c.5, c.6, c.7, c.8, c.9, purged, since, nodes, missing,
    ))
}

/// `idem.tenant_counter_totals()`: the counters per tenant idem_tenant_stats() shows: this
/// server's, or on a Citus coordinator of a distributed idem.keys summed over every node that
/// answered (idem_stats() says which did not).
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn idem_tenant_counter_totals() -> TableIterator<
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
        name!(consumed, Option<i64>),
        name!(consume_duplicates, Option<i64>),
    ),
> {
    let rows: Vec<(Option<String>, Values)> = if crate::cluster::coordinator_of_distributed_keys() {
        let command = "SELECT pg_catalog.json_agg(c) FROM %I.idem_tenant_counters() AS c";
        let mut by_tenant: std::collections::BTreeMap<Option<String>, Values> =
            std::collections::BTreeMap::new();
        for answer in crate::cluster::on_every_node(command) {
            let rows = answer
                .result
                .and_then(|r| serde_json::from_str::<Vec<serde_json::Value>>(&r).ok())
                .unwrap_or_default();
            for row in rows {
                let tenant = row
                    .get("tenant")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned);
                let total = by_tenant.entry(tenant).or_insert([None; EVENT_COUNT]);
                for (t, v) in total.iter_mut().zip(values_of_json(&row)) {
                    add(t, v);
                }
            }
        }
        by_tenant.into_iter().collect()
    } else {
        tenant_snapshot()
            .into_iter()
            .map(|(tenant, events)| (tenant, values(Some(&events))))
            .collect()
    };
    TableIterator::new(rows.into_iter().map(|(tenant, v)| {
        let c = row(v);
        (tenant, c.0, c.1, c.2, c.3, c.4, c.5, c.6, c.7, c.8, c.9)
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
