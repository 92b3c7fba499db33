//! What idem_stats() and idem_tenant_stats() count, gathered: one node's keys by state and its
//! counters (`NodeStatistics`), and on a Citus coordinator of a distributed idem.keys their sum
//! over every node that answers (`statistics`); a single server is a cluster of one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use pgrx::prelude::*;

use super::counters;
use super::counts::{self, Counts, Totals};
use crate::pg::time::Micros;
use crate::rules::key_row::in_sql;

/// The keys of one tenant by state. Expired keys count as expired whatever their state;
/// stalled keys are in progress past their lease.
#[derive(Clone, Copy, Default, Serialize, Deserialize)]
pub struct KeyCounts {
    pub in_progress: i64,
    pub completed: i64,
    pub failed: i64,
    pub stalled: i64,
    pub expired: i64,
    /// the oldest attempt in progress (claimed_at, TimestampTz)
    pub oldest_in_progress: Option<Micros>,
}

impl KeyCounts {
    pub fn add(&mut self, other: &KeyCounts) {
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
/// The field names and shapes are that JSON's: nodes upgraded one at a time must read each other.
#[derive(Default, Serialize, Deserialize)]
pub struct NodeStatistics {
    keys: Vec<(String, KeyCounts)>,
    counters: Counts,
    purged: Option<i64>,
    /// when the counters started (TimestampTz): the server's start or the last reset
    since: Option<Micros>,
    tenants: Vec<(Option<String>, Counts)>,
}

/// Key counts per tenant of one table holding keys: idem.keys, or a shard of it (a name from
/// `cluster::local_key_tables`, never a value from a caller). One scan of the table.
fn key_counts_sql(table: &str) -> String {
    let live = format!("NOT ({})", in_sql::is_expired("k", "$1"));
    let expired = in_sql::is_expired("k", "$1");
    let lease_passed = in_sql::lease_is_not_live("k", "$1");
    let state = |code: &str| format!("k.state OPERATOR(pg_catalog.=) '{code}'");
    let (p, c, f) = (state("p"), state("c"), state("f"));
    format!(
        "SELECT k.tenant, \
           pg_catalog.count(*) FILTER (WHERE {p} AND {live}), \
           pg_catalog.count(*) FILTER (WHERE {c} AND {live}), \
           pg_catalog.count(*) FILTER (WHERE {f} AND {live}), \
           pg_catalog.count(*) FILTER (WHERE {p} AND {live} AND {lease_passed}), \
           pg_catalog.count(*) FILTER (WHERE {expired}), \
           pg_catalog.min(k.claimed_at) FILTER (WHERE {p} AND {live}) \
         FROM {table} AS k GROUP BY k.tenant"
    )
}

/// A column of a key count row; a failed read is an internal error (the query fixes the types).
fn read<T>(column: Result<Option<T>, pgrx::spi::SpiError>) -> Option<T> {
    column.unwrap_or_else(|e| crate::errors::internal("counting keys", e).raise())
}

/// This node's statistics.
pub fn node_statistics() -> NodeStatistics {
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
    let totals = Totals::local();
    NodeStatistics {
        keys: by_tenant.into_iter().collect(),
        counters: totals.counts,
        purged: totals.purged,
        since: totals.since,
        tenants: counters::tenant_snapshot()
            .into_iter()
            .map(|row| (row.tenant, Counts::of(&row.events)))
            .collect(),
    }
}

/// The statistics idem_stats() and idem_tenant_stats() show: this server's, or on a Citus
/// coordinator of a distributed idem.keys the sum over every node that answered (each node
/// holds its tenants' keys and counts what ran there; delegated calls run on the workers); with
/// how many nodes are in the sum, and which did not answer. `since` is then the latest start or
/// reset among the nodes summed: every one of them has been counting since.
pub struct Statistics {
    pub keys: BTreeMap<String, KeyCounts>,
    pub counters: Counts,
    pub purged: Option<i64>,
    pub since: Option<Micros>,
    pub tenants: BTreeMap<Option<String>, Counts>,
    pub nodes: i32,
    pub missing: Vec<String>,
}

pub fn statistics() -> Statistics {
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
        counters: Counts::default(),
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
        total.counters.add(&node.counters);
        counts::add(&mut total.purged, node.purged);
        total.since = total.since.max(node.since);
        for (tenant, counts) in &node.tenants {
            total.tenants.entry(tenant.clone()).or_default().add(counts);
        }
    }
    total
}
