//! pg_idem on a Citus cluster (a coordinator and two worker nodes, each a real server): every
//! function through the three ways a call reaches the keys (delegated to the node holding the
//! tenant, delegated inside a transaction block, and run on the coordinator with its statements
//! routed), fences across nodes, exactly one business effect per key under concurrency with the
//! business rows colocated, stale fences refused together with their business write, the purge
//! (on demand and by each node's worker), the statistics, and a worker node or the coordinator
//! going down.
//!
//! Skipped when Citus is not installed (../shared/citus/install.sh, or Citus's own packages):
//! reported through `skip_test` as skipped, not passed; a failure instead where the test command
//! installed Citus (PG_IDEM_REQUIRE=citus).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use pg_idem_tests::*;

mod every_path;
mod fences;
mod node_down;
mod purge_and_statistics;
mod tenants_and_look_alikes;
mod update;

/// None (the test is recorded as skipped) when Citus is not installed.
fn cluster(conf: &[&str]) -> Option<Cluster> {
    cluster_distributed(Some(8), conf)
}

fn cluster_distributed(shard_count: Option<i32>, conf: &[&str]) -> Option<Cluster> {
    if !citus_available() {
        skip_test(
            "citus",
            "Citus is not installed into this PostgreSQL; install it (on these machines: \
             ../shared/citus/install.sh; elsewhere Citus's own packages) to run the cluster tests",
        );
        return None;
    }
    // the purge workers stay paused unless a test asks for them (later lines win)
    let conf = [&["pg_idem.purge_interval = 0"], conf].concat();
    Some(Cluster::start(2, shard_count, &conf))
}

/// How a call reaches the node that holds the tenant.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    /// `SELECT idem_x(...)` on the coordinator: Citus runs the whole call on the tenant's node
    Delegated,
    /// the same inside BEGIN ... COMMIT (force_delegation)
    InTransaction,
    /// `SELECT (SELECT idem_x(...))`: not a bare call, so Citus does not delegate it; the
    /// function runs on the coordinator, and Citus routes each of its statements to the
    /// tenant's shard
    Coordinator,
}

const PATHS: [Path; 3] = [Path::Delegated, Path::InTransaction, Path::Coordinator];

fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Runs `call` (an SQL function call) the way `path` says; its first row as text.
fn call(db: &mut Client, path: Path, call: &str) -> Result<Option<String>, postgres::Error> {
    match path {
        Path::Delegated => simple_one(db, &format!("SELECT {call}")),
        Path::Coordinator => simple_one(db, &format!("SELECT (SELECT {call})::text")),
        Path::InTransaction => {
            db.batch_execute("BEGIN").unwrap();
            let result = simple_one(db, &format!("SELECT {call}"));
            db.batch_execute(if result.is_ok() { "COMMIT" } else { "ROLLBACK" })
                .unwrap();
            result
        }
    }
}

fn ok(db: &mut Client, path: Path, sql: &str) -> Option<String> {
    call(db, path, sql).unwrap_or_else(|e| panic!("{path:?} {sql}: {e:?}"))
}

fn refused(db: &mut Client, path: Path, sql: &str) -> String {
    match call(db, path, sql) {
        Ok(r) => panic!("{path:?} {sql}: expected an error, got {r:?}"),
        Err(e) => sqlstate(&e),
    }
}

/// outcome, fence, attempt, response_code, response_body of an idem_claim record
fn claim_on(
    db: &mut Client,
    path: Path,
    tenant: &str,
    key: &str,
    hash: &str,
    lease: &str,
) -> (
    String,
    Option<i64>,
    Option<i32>,
    Option<i32>,
    Option<String>,
) {
    let text = ok(
        db,
        path,
        &format!(
            "idem_claim({}, {}, {}, {})",
            q(tenant),
            q(key),
            q(hash),
            q(lease)
        ),
    )
    .expect("a claim record");
    let f = record_fields(&text);
    (
        f[0].clone().expect("outcome"),
        f[1].as_ref().map(|v| v.parse().unwrap()),
        f[2].as_ref().map(|v| v.parse().unwrap()),
        f[3].as_ref().map(|v| v.parse().unwrap()),
        f[4].clone(),
    )
}

fn claims_counted(server: &Server) -> i64 {
    server
        .client()
        .query_one("SELECT claims FROM idem_counters()", &[])
        .unwrap()
        .get(0)
}

fn local_keys(server: &Server) -> i64 {
    // the shards of idem.keys placed on this node, read there
    let mut db = server.client();
    let shards: Vec<String> = db.column(
        "SELECT shard_name('idem.keys'::regclass, s.shardid) FROM pg_dist_shard s \
               JOIN pg_dist_placement p USING (shardid) \
              WHERE s.logicalrelid = 'idem.keys'::regclass \
                AND p.groupid = (SELECT groupid FROM pg_dist_local_group)",
        &[],
    );
    assert!(!shards.is_empty(), "this worker holds shards of idem.keys");
    shards
        .iter()
        .map(|s| {
            db.query_one(&format!("SELECT count(*) FROM {s}"), &[])
                .unwrap()
                .get::<_, i64>(0)
        })
        .sum()
}
