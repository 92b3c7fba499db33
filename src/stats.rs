//! Cumulative counters since server start, kept in shared memory when pg_idem is preloaded, in
//! total and per tenant (for up to TENANT_SLOTS tenants; later tenants share one "other" row).
//! Without the preload there is no shared memory to keep them in: recording is a no-op and the
//! SQL functions report NULL counters.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

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
    crate::pg::preload::active()
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
/// also the names of the columns that idem_stats() and idem_tenant_stats() show.
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

/// This server's counters, and since when they count (its start or crash restart, or the last
/// reset).
fn local_totals() -> (Values, Option<i64>, Option<TimestampWithTimeZone>) {
    let snap = snapshot();
    let since = snap
        .as_ref()
        .map(|s| crate::pg::time::timestamptz(s.reset_at));
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
// Statistics of a node, and of a cluster: what idem_stats() and idem_tenant_stats() show
// ---------------------------------------------------------------------------------------------

/// The keys of one tenant by state. Expired keys count as expired whatever their state;
/// stalled keys are in progress past their lease.
#[derive(Clone, Copy, Default, Serialize, Deserialize)]
struct KeyCounts {
    in_progress: i64,
    completed: i64,
    failed: i64,
    stalled: i64,
    expired: i64,
    /// the oldest attempt in progress (claimed_at, TimestampTz)
    oldest_in_progress: Option<i64>,
}

impl KeyCounts {
    fn add(&mut self, other: &KeyCounts) {
        self.in_progress += other.in_progress;
        self.completed += other.completed;
        self.failed += other.failed;
        self.stalled += other.stalled;
        self.expired += other.expired;
        self.oldest_in_progress = match (self.oldest_in_progress, other.oldest_in_progress) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// What one node knows: its keys per tenant (from the tables that hold them there), and its
/// counters in total and per tenant (from its shared memory). A Citus coordinator asks every
/// node for this (`idem.node_statistics()`, as JSON) and sums what the nodes answer, so that a
/// node that does not answer is left out of the sum and named, instead of failing the query.
#[derive(Default, Serialize, Deserialize)]
struct NodeStatistics {
    keys: Vec<(String, KeyCounts)>,
    counters: Values,
    purged: Option<i64>,
    /// when the counters started (TimestampTz): the server's start or the last reset
    since: Option<i64>,
    tenants: Vec<(Option<String>, Values)>,
}

/// Key counts per tenant of one table holding keys: idem.keys, or a shard of it (a name from
/// `cluster::local_key_tables`, never a value from a caller). One scan of the table.
fn key_counts_sql(table: &str) -> String {
    format!(
        "SELECT k.tenant, \
           pg_catalog.count(*) FILTER (WHERE k.state OPERATOR(pg_catalog.=) 'p' AND k.expires_at OPERATOR(pg_catalog.>=) $1), \
           pg_catalog.count(*) FILTER (WHERE k.state OPERATOR(pg_catalog.=) 'c' AND k.expires_at OPERATOR(pg_catalog.>=) $1), \
           pg_catalog.count(*) FILTER (WHERE k.state OPERATOR(pg_catalog.=) 'f' AND k.expires_at OPERATOR(pg_catalog.>=) $1), \
           pg_catalog.count(*) FILTER (WHERE k.state OPERATOR(pg_catalog.=) 'p' AND k.expires_at OPERATOR(pg_catalog.>=) $1 \
                                        AND k.lease_expires_at OPERATOR(pg_catalog.<) $1), \
           pg_catalog.count(*) FILTER (WHERE k.expires_at OPERATOR(pg_catalog.<) $1), \
           pg_catalog.min(k.claimed_at) FILTER (WHERE k.state OPERATOR(pg_catalog.=) 'p' AND k.expires_at OPERATOR(pg_catalog.>=) $1) \
         FROM {table} AS k GROUP BY k.tenant"
    )
}

/// A column of a key count row; a failed read is an internal error (the query fixes the types).
fn read<T>(column: Result<Option<T>, pgrx::spi::SpiError>) -> Option<T> {
    column.unwrap_or_else(|e| crate::errors::internal("counting keys", e).raise())
}

/// This node's statistics.
fn node_statistics() -> NodeStatistics {
    let now = crate::pg::time::clock();
    let mut by_tenant: BTreeMap<String, KeyCounts> = BTreeMap::new();
    crate::pg::sql::with_client(|client| {
        for table in crate::pg::cluster::local_key_tables(client) {
            let rows = client.run(
                &key_counts_sql(&table),
                &[crate::pg::sql::timestamptz_arg(now)],
            );
            for row in rows {
                pgrx::check_for_interrupts!();
                let tenant: String = read(row.get::<String>(1)).unwrap_or_else(|| {
                    crate::errors::internal("counting keys", "a key without a tenant").raise()
                });
                let count = |n| read(row.get::<i64>(n)).unwrap_or(0);
                let counts = KeyCounts {
                    in_progress: count(2),
                    completed: count(3),
                    failed: count(4),
                    stalled: count(5),
                    expired: count(6),
                    oldest_in_progress: read(row.get::<TimestampWithTimeZone>(7))
                        .map(|t| t.into_inner()),
                };
                by_tenant.entry(tenant).or_default().add(&counts);
            }
        }
    });
    let (counters, purged, since) = local_totals();
    NodeStatistics {
        keys: by_tenant.into_iter().collect(),
        counters,
        purged,
        since: since.map(|s| s.into_inner()),
        tenants: tenant_snapshot()
            .into_iter()
            .map(|(tenant, events)| (tenant, values(Some(&events))))
            .collect(),
    }
}

/// `idem.node_statistics()`: this node's statistics as JSON, for a coordinator that sums them.
#[pg_extern(sql = false)]
fn idem_node_statistics() -> String {
    serde_json::to_string(&node_statistics())
        .unwrap_or_else(|e| crate::errors::internal("writing a node's statistics", e).raise())
}

/// Adds a node's value to a total; a node without counters (NULL) adds nothing.
fn add(total: &mut Option<i64>, value: Option<i64>) {
    if let Some(v) = value {
        *total = Some(total.unwrap_or(0).saturating_add(v));
    }
}

fn add_values(total: &mut Values, values: &Values) {
    for (t, v) in total.iter_mut().zip(values) {
        add(t, *v);
    }
}

/// The statistics idem_stats() and idem_tenant_stats() show: this server's, or on a Citus
/// coordinator of a distributed idem.keys the sum over every node that answered (each node
/// holds its tenants' keys and counts what ran there; delegated calls run on the workers); with
/// how many nodes are in the sum, and which did not answer. `since` is then the latest start or
/// reset among the nodes summed: every one of them has been counting since.
struct Statistics {
    keys: BTreeMap<String, KeyCounts>,
    counters: Values,
    purged: Option<i64>,
    since: Option<i64>,
    tenants: BTreeMap<Option<String>, Values>,
    nodes: i32,
    missing: Vec<String>,
}

fn statistics() -> Statistics {
    let (answers, missing) = if crate::pg::cluster::coordinator_of_distributed_keys() {
        let mut answers = Vec::new();
        let mut missing = Vec::new();
        // `idem` is the extension's own schema (created and owned by it), never relocated
        for answer in crate::pg::cluster::on_every_node("SELECT idem.node_statistics()") {
            match answer
                .result
                .and_then(|r| serde_json::from_str::<NodeStatistics>(&r).ok())
            {
                Some(node) => answers.push(node),
                None => missing.push(answer.node),
            }
        }
        (answers, missing)
    } else {
        (vec![node_statistics()], Vec::new())
    };
    let mut total = Statistics {
        keys: BTreeMap::new(),
        counters: [None; EVENT_COUNT],
        purged: None,
        since: None,
        tenants: BTreeMap::new(),
        // the nodes whose counters are in the sum: none without the preload (NULL counters)
        nodes: answers.iter().filter(|n| n.since.is_some()).count() as i32,
        missing,
    };
    for node in answers {
        for (tenant, counts) in &node.keys {
            total.keys.entry(tenant.clone()).or_default().add(counts);
        }
        add_values(&mut total.counters, &node.counters);
        add(&mut total.purged, node.purged);
        total.since = total.since.max(node.since);
        for (tenant, values) in &node.tenants {
            add_values(
                total
                    .tenants
                    .entry(tenant.clone())
                    .or_insert([None; EVENT_COUNT]),
                values,
            );
        }
    }
    total
}

fn timestamp(micros: Option<i64>) -> Option<TimestampWithTimeZone> {
    micros.map(crate::pg::time::timestamptz)
}

/// `idem.statistics()`: the keys by state and the counters, in total (see `statistics`).
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn idem_statistics() -> TableIterator<
    'static,
    (
        name!(keys_in_progress, i64),
        name!(keys_completed, i64),
        name!(keys_failed, i64),
        name!(keys_stalled, i64),
        name!(keys_expired, i64),
        name!(oldest_in_progress_at, Option<TimestampWithTimeZone>),
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
        name!(counters_since, Option<TimestampWithTimeZone>),
        name!(nodes, i32),
        name!(missing_nodes, Vec<String>),
    ),
> {
    let s = statistics();
    let mut keys = KeyCounts::default();
    for counts in s.keys.values() {
        keys.add(counts);
    }
    let c = row(s.counters);
    TableIterator::once((
        keys.in_progress,
        keys.completed,
        keys.failed,
        keys.stalled,
        keys.expired,
        timestamp(keys.oldest_in_progress),
        c.0,
        c.1,
        c.2,
        c.3,
        c.4,
        c.5,
        c.6,
        c.7,
        c.8,
        c.9,
        s.purged,
        timestamp(s.since),
        s.nodes,
        s.missing,
    ))
}

/// `idem.tenant_statistics()`: the keys by state and the counters per tenant (see
/// `statistics`), by tenant; the counters of tenants past the first 1024 a node saw come in a
/// row with a NULL tenant.
#[pg_extern(sql = false)]
#[allow(clippy::type_complexity)]
fn idem_tenant_statistics() -> TableIterator<
    'static,
    (
        name!(tenant, Option<String>),
        name!(keys_in_progress, i64),
        name!(keys_completed, i64),
        name!(keys_failed, i64),
        name!(keys_stalled, i64),
        name!(keys_expired, i64),
        name!(oldest_in_progress_at, Option<TimestampWithTimeZone>),
        name!(claims, Option<i64>),
        name!(replays, Option<i64>),
        name!(in_progress, Option<i64>),
        name!(mismatches, Option<i64>),
        name!(takeovers, Option<i64>),
        name!(stale_fences, Option<i64>),
        name!(consumed, Option<i64>),
        name!(consume_duplicates, Option<i64>),
    ),
> {
    let mut s = statistics();
    let mut tenants: BTreeMap<Option<String>, (KeyCounts, Values)> = BTreeMap::new();
    for (tenant, counts) in std::mem::take(&mut s.keys) {
        tenants.entry(Some(tenant)).or_default().0 = counts;
    }
    for (tenant, values) in std::mem::take(&mut s.tenants) {
        tenants.entry(tenant).or_default().1 = values;
    }
    TableIterator::new(tenants.into_iter().map(|(tenant, (k, v))| {
        let c = row(v);
        let replays = match (c.1, c.2) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        (
            tenant,
            k.in_progress,
            k.completed,
            k.failed,
            k.stalled,
            k.expired,
            timestamp(k.oldest_in_progress),
            c.0,
            replays,
            c.3,
            c.4,
            c.5,
            c.6,
            c.8,
            c.9,
        )
    }))
}

/// `idem_stats_reset()`: zeroes every counter; returns false without the preload.
#[pg_extern(sql = false)]
fn idem_stats_reset() -> bool {
    reset(crate::pg::time::clock());
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
