//! The SQL functions of sql/stats.sql (declared there: `sql = false`), shaping the counters and
//! statistics into their rows: each column takes the field of its name.

use std::collections::BTreeMap;

use pgrx::prelude::*;

use super::cluster::{self, KeyCounts};
use super::counters;
use super::counts::{Counts, Totals};
use crate::pg::time::Micros;

fn timestamp(micros: Option<Micros>) -> Option<TimestampWithTimeZone> {
    micros.map(crate::pg::time::timestamptz)
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
    let Totals {
        counts: c,
        purged,
        since,
    } = Totals::local();
    TableIterator::once((
        c.claims,
        c.replays_completed,
        c.replays_failed,
        c.in_progress,
        c.mismatches,
        c.takeovers,
        c.stale_fences,
        c.stale_keys,
        purged,
        timestamp(since),
        c.consumed,
        c.consume_duplicates,
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
    TableIterator::new(counters::tenant_snapshot().into_iter().map(|row| {
        let c = Counts::of(&row.events);
        (
            row.tenant,
            c.claims,
            c.replays_completed,
            c.replays_failed,
            c.in_progress,
            c.mismatches,
            c.takeovers,
            c.stale_fences,
            c.stale_keys,
            c.consumed,
            c.consume_duplicates,
        )
    }))
}

/// `idem.node_statistics()`: this node's statistics as JSON, for a coordinator that sums them.
#[pg_extern(sql = false)]
fn idem_node_statistics() -> String {
    serde_json::to_string(&cluster::node_statistics())
        .unwrap_or_else(|e| crate::errors::internal("writing a node's statistics", e).raise())
}

/// `idem.statistics()`: the keys by state and the counters, in total (see `cluster::statistics`).
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
    let s = cluster::statistics();
    let mut keys = KeyCounts::default();
    for counts in s.keys.values() {
        keys.add(counts);
    }
    let c = s.counters;
    TableIterator::once((
        keys.in_progress,
        keys.completed,
        keys.failed,
        keys.stalled,
        keys.expired,
        timestamp(keys.oldest_in_progress),
        c.claims,
        c.replays_completed,
        c.replays_failed,
        c.in_progress,
        c.mismatches,
        c.takeovers,
        c.stale_fences,
        c.stale_keys,
        c.consumed,
        c.consume_duplicates,
        s.purged,
        timestamp(s.since),
        s.nodes,
        s.missing,
    ))
}

/// One tenant's row of idem.tenant_statistics(): its keys, and its counters.
#[derive(Default)]
struct TenantStatistics {
    keys: KeyCounts,
    counts: Counts,
}

/// `idem.tenant_statistics()`: the keys by state and the counters per tenant (see
/// `cluster::statistics`), by tenant; the counters of tenants past the first 1024 a node saw
/// come in a row with a NULL tenant.
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
    let s = cluster::statistics();
    let mut tenants: BTreeMap<Option<String>, TenantStatistics> = BTreeMap::new();
    for (tenant, keys) in s.keys {
        tenants.entry(Some(tenant)).or_default().keys = keys;
    }
    for (tenant, counts) in s.tenants {
        tenants.entry(tenant).or_default().counts = counts;
    }
    TableIterator::new(tenants.into_iter().map(|(tenant, row)| {
        let (k, c) = (row.keys, row.counts);
        (
            tenant,
            k.in_progress,
            k.completed,
            k.failed,
            k.stalled,
            k.expired,
            timestamp(k.oldest_in_progress),
            c.claims,
            c.replays(),
            c.in_progress,
            c.mismatches,
            c.takeovers,
            c.stale_fences,
            c.consumed,
            c.consume_duplicates,
        )
    }))
}

/// `idem_stats_reset()`: zeroes every counter; returns false without the preload.
#[pg_extern(sql = false)]
fn idem_stats_reset() -> bool {
    counters::reset(crate::pg::time::clock());
    counters::available()
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
        claim("counters_count_outcomes", "k", "h");
        claim("counters_count_outcomes", "k", "h");
        claim("counters_count_outcomes", "k", "x");
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
