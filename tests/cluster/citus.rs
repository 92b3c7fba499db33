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

/// Every function answers on the cluster as on one server, through each of the three paths,
/// for tenants on both worker nodes; the delegated paths run on the worker node, the
/// coordinator path on the coordinator.
#[test]
fn every_function_answers_on_the_cluster_through_every_path() {
    let Some(cluster) = cluster(&[]) else { return };
    let mut db = cluster.coordinator.client();
    for path in PATHS {
        for tenant in cluster.tenant_per_worker(&format!("{path:?}-")) {
            let node = cluster.node_of(&tenant);
            let (on_node, on_coordinator) =
                (claims_counted(node), claims_counted(&cluster.coordinator));
            let t = q(&tenant);
            let (outcome, fence, attempt, _, _) =
                claim_on(&mut db, path, &tenant, "k1", "h", "1 minute");
            assert_eq!(
                (outcome.as_str(), attempt),
                ("claimed", Some(1)),
                "{path:?}"
            );
            let f1 = fence.unwrap();
            let ran_on = if path == Path::Coordinator {
                &cluster.coordinator
            } else {
                node
            };
            let other = if path == Path::Coordinator {
                node
            } else {
                &cluster.coordinator
            };
            assert_eq!(
                claims_counted(ran_on),
                if path == Path::Coordinator {
                    on_coordinator
                } else {
                    on_node
                } + 1,
                "{path:?}: the claim ran where this path runs it"
            );
            assert_eq!(
                claims_counted(other),
                if path == Path::Coordinator {
                    on_node
                } else {
                    on_coordinator
                }
            );

            assert_eq!(
                claim_on(&mut db, path, &tenant, "k1", "h", "1 minute").0,
                "in_progress"
            );
            assert_eq!(
                claim_on(&mut db, path, &tenant, "k1", "other", "1 minute").0,
                "mismatch"
            );
            ok(
                &mut db,
                path,
                &format!("idem_heartbeat({t}, 'k1', {f1}, '2 minutes')"),
            );
            ok(
                &mut db,
                path,
                &format!("idem_checkpoint({t}, 'k1', {f1}, 'charged', '{{\"x\": 1}}')"),
            );
            ok(
                &mut db,
                path,
                &format!("idem_assert_fence({t}, 'k1', {f1})"),
            );
            assert_eq!(
                refused(
                    &mut db,
                    path,
                    &format!("idem_assert_fence({t}, 'k1', {})", f1 + 1)
                ),
                "55000"
            );
            assert_eq!(
                refused(
                    &mut db,
                    path,
                    &format!("idem_complete({t}, 'k1', {}, 200)", f1 + 1)
                ),
                "55000"
            );
            ok(
                &mut db,
                path,
                &format!("idem_complete({t}, 'k1', {f1}, 201, '{{\"ok\": true}}')"),
            );
            let (outcome, _, _, code, body) =
                claim_on(&mut db, path, &tenant, "k1", "h", "1 minute");
            assert_eq!(
                (outcome.as_str(), code, body.as_deref()),
                ("completed", Some(201), Some("{\"ok\": true}")),
                "{path:?}"
            );
            assert_eq!(
                refused(
                    &mut db,
                    path,
                    &format!("idem_complete({t}, 'k1', {f1}, 200)")
                ),
                "55000"
            );
            assert_eq!(
                refused(
                    &mut db,
                    path,
                    &format!("idem_complete({t}, 'missing', 1, 200)")
                ),
                "P0002"
            );
            assert_eq!(
                refused(&mut db, path, &format!("idem_complete({t}, NULL, 1, 200)")),
                "22004"
            );

            let f2 = claim_on(&mut db, path, &tenant, "k2", "h", "1 minute")
                .1
                .unwrap();
            ok(
                &mut db,
                path,
                &format!("idem_fail_final({t}, 'k2', {f2}, 422, '{{}}')"),
            );
            assert_eq!(
                claim_on(&mut db, path, &tenant, "k2", "h", "1 minute").0,
                "failed"
            );

            let f3 = claim_on(&mut db, path, &tenant, "k3", "h", "1 minute")
                .1
                .unwrap();
            ok(&mut db, path, &format!("idem_release({t}, 'k3', {f3})"));
            let again = claim_on(&mut db, path, &tenant, "k3", "h", "1 minute");
            assert_eq!((again.0.as_str(), again.2), ("claimed", Some(1)));
            assert!(again.1.unwrap() > f3, "{path:?}: a new fence after release");

            let f4 = claim_on(&mut db, path, &tenant, "k4", "h", "1 ms")
                .1
                .unwrap();
            thread::sleep(Duration::from_millis(20));
            let takeover = claim_on(&mut db, path, &tenant, "k4", "h", "1 minute");
            assert_eq!(
                (takeover.0.as_str(), takeover.2),
                ("claimed", Some(2)),
                "{path:?}"
            );
            assert!(takeover.1.unwrap() > f4);

            // boolean text: "t" from the result, "true" from a cast to text
            let forgot = ok(&mut db, path, &format!("idem_forget({t}, 'k1')"));
            assert!(
                matches!(forgot.as_deref(), Some("t" | "true")),
                "{forgot:?}"
            );
            let fresh = claim_on(&mut db, path, &tenant, "k1", "h", "1 minute");
            assert_eq!(fresh.0, "claimed");
            assert!(
                fresh.1.unwrap() > f1,
                "{path:?}: a fence after forget is larger"
            );

            let many = db
                .simple_query(&format!(
                    "SELECT idem_claim_many({t}, ARRAY['m1', 'm2'], ARRAY['h', 'h'])"
                ))
                .unwrap()
                .into_iter()
                .filter(|m| matches!(m, postgres::SimpleQueryMessage::Row(_)))
                .count();
            assert_eq!(many, 2);
            assert_eq!(
                ok(&mut db, path, &format!("idem_claim_seq({t}, 's', 1)")).as_deref(),
                Some("(new,1)")
            );
            assert_eq!(
                ok(&mut db, path, &format!("idem_claim_seq({t}, 's', 1)")).as_deref(),
                Some("(duplicate,1)")
            );
            assert_eq!(
                ok(&mut db, path, &format!("idem_watermark({t}, 's')")).as_deref(),
                Some("1")
            );
            assert_eq!(
                ok(&mut db, path, &format!("idem_reset_watermark({t}, 's', 0)")).as_deref(),
                Some("1"),
                "{path:?}: the previous watermark"
            );
            assert_eq!(
                ok(&mut db, path, &format!("idem_claim_seq({t}, 's', 1)")).as_deref(),
                Some("(new,1)")
            );
        }
    }
    // everything above lives on the worker nodes, none of it on the coordinator
    let total: i64 = db
        .query_one("SELECT count(*) FROM idem.keys", &[])
        .unwrap()
        .get(0);
    let on_workers: i64 = cluster.workers.iter().map(local_keys).sum();
    assert_eq!(total, on_workers);
    assert!(total >= 6 * 6);
}

/// A key's fences keep growing whichever node hands them out: each node has its own sequence,
/// so a fence is at least the node's clock, and a takeover's exceeds the one it replaces.
#[test]
fn fences_grow_per_key_across_nodes() {
    let Some(cluster) = cluster(&[]) else { return };
    let mut db = cluster.coordinator.client();
    // the workers' sequences run ahead of the coordinator's
    for i in 0..20 {
        claim_on(
            &mut db,
            Path::Delegated,
            &format!("warm{i}"),
            "k",
            "h",
            "1 minute",
        );
    }
    // per key: the last fence handed out
    let mut last = HashMap::from([("forgotten", 0i64), ("taken", 0i64)]);
    for (i, path) in [
        Path::Delegated,
        Path::Coordinator,
        Path::Delegated,
        Path::Coordinator,
        Path::InTransaction,
    ]
    .into_iter()
    .enumerate()
    {
        // "forgotten": claimed after a forget (no row left to compare with); "taken": claimed
        // after its 1 ms lease passed (a takeover of the row)
        for (key, lease) in [("forgotten", "1 minute"), ("taken", "1 ms")] {
            let (outcome, fence, ..) = claim_on(&mut db, path, "acme", key, "h", lease);
            assert_eq!(outcome, "claimed");
            let fence = fence.unwrap();
            let before = last[key];
            assert!(
                fence > before,
                "round {i} {path:?} {key}: fence {fence} after {before}"
            );
            last.insert(key, fence);
        }
        ok(&mut db, path, "idem_forget('acme', 'forgotten')");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Many connections claim the same keys through both paths, inside the business transaction;
/// some roll back, some take a lease and vanish without finishing. Every key ends with exactly
/// one business row, on the node that holds the key.
#[test]
fn exactly_one_business_effect_per_key_with_business_rows_colocated() {
    let Some(cluster) = cluster(&[]) else { return };
    let mut db = cluster.coordinator.client();
    db.batch_execute(
        "CREATE TABLE orders (tenant text NOT NULL, key text NOT NULL, fence bigint NOT NULL); \
         SELECT create_distributed_table('orders', 'tenant', colocate_with => 'idem.keys');",
    )
    .expect("orders colocated with idem.keys");
    let keys: Vec<(String, String)> = (0..6)
        .flat_map(|t| (0..8).map(move |k| (format!("tenant{t}"), format!("order-{k}"))))
        .collect();
    let keys = Arc::new(keys);
    let errors = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let threads: Vec<_> = (0..6)
        .map(|n| {
            let conninfo = cluster.coordinator.conninfo("postgres");
            let keys = keys.clone();
            let errors = errors.clone();
            thread::spawn(move || {
                let mut db = Client::connect(&conninfo, NoTls).unwrap();
                let mut rng = workload::Rng2::new(n as u64 + 1);
                for round in 0..3 {
                    for i in 0..keys.len() {
                        let (tenant, key) = &keys[(i * (n + 1) + round) % keys.len()];
                        let coordinator = rng.below(2) == 0;
                        // 0: the attempt fails before its business write (rolls back); 1: it
                        // takes a short lease for work elsewhere and vanishes (commits the claim)
                        let fate = rng.below(10);
                        let lease = if fate == 1 { "'30 ms'" } else { "'1 minute'" };
                        let claim_sql =
                            format!("idem_claim({}, {}, 'h', {lease})", q(tenant), q(key));
                        db.batch_execute("BEGIN").unwrap();
                        let claimed = if coordinator {
                            simple_one(&mut db, &format!("SELECT (SELECT {claim_sql})::text"))
                        } else {
                            simple_one(&mut db, &format!("SELECT {claim_sql}"))
                        };
                        let fields = match claimed {
                            Ok(text) => record_fields(&text.unwrap()),
                            Err(e) => {
                                *errors
                                    .lock()
                                    .unwrap()
                                    .entry(format!("claim {}", sqlstate(&e)))
                                    .or_default() += 1;
                                db.batch_execute("ROLLBACK").unwrap();
                                continue;
                            }
                        };
                        if fields[0].as_deref() != Some("claimed") {
                            db.batch_execute("ROLLBACK").unwrap();
                            continue;
                        }
                        let fence = fields[1].clone().unwrap();
                        match fate {
                            0 => {
                                db.batch_execute("ROLLBACK").unwrap();
                                continue;
                            }
                            1 => {
                                db.batch_execute("COMMIT").unwrap();
                                continue;
                            }
                            _ => {}
                        }
                        let done = db
                            .batch_execute(&format!(
                                "INSERT INTO orders VALUES ({}, {}, {fence}); \
                                 SELECT idem_complete({}, {}, {fence}, 201)",
                                q(tenant),
                                q(key),
                                q(tenant),
                                q(key)
                            ))
                            .and_then(|_| db.batch_execute("COMMIT"));
                        if let Err(e) = done {
                            *errors
                                .lock()
                                .unwrap()
                                .entry(format!("complete {}", sqlstate(&e)))
                                .or_default() += 1;
                            let _ = db.batch_execute("ROLLBACK");
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a client thread");
    }
    // finish what vanished workers left: take each key over once its lease has passed
    thread::sleep(Duration::from_millis(100));
    for (tenant, key) in keys.iter() {
        let (outcome, fence, ..) = claim_on(&mut db, Path::Delegated, tenant, key, "h", "1 minute");
        if outcome == "claimed" {
            let fence = fence.unwrap();
            db.batch_execute(&format!(
                "BEGIN; INSERT INTO orders VALUES ({t}, {k}, {fence}); SELECT idem_complete({t}, {k}, {fence}, 201); COMMIT",
                t = q(tenant),
                k = q(key)
            ))
            .unwrap();
        } else {
            assert_eq!(outcome, "completed", "{tenant}/{key}");
        }
    }
    let rows = db
        .query(
            "SELECT o.tenant, o.key, count(*) FROM orders o GROUP BY o.tenant, o.key",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), keys.len(), "every key has its business row");
    for row in rows {
        let (tenant, key, n): (String, String, i64) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(n, 1, "{tenant}/{key}: exactly one business row");
    }
    for t in 0..6 {
        let tenant = format!("tenant{t}");
        let groups: Vec<i32> = ["orders", "idem.keys"]
            .iter()
            .map(|table| {
                db.query_one(
                    "SELECT p.groupid FROM pg_dist_placement p \
                      WHERE p.shardid = get_shard_id_for_distribution_column($1::text::regclass, $2::text)",
                    &[&table.to_string(), &tenant],
                )
                .unwrap()
                .get(0)
            })
            .collect();
        assert_eq!(
            groups[0], groups[1],
            "{tenant}: orders on the node of its keys"
        );
    }
    let completed: i64 = db
        .query_one("SELECT keys_completed FROM idem_stats()", &[])
        .unwrap()
        .get(0);
    assert_eq!(completed as usize, keys.len());
    let errors = errors.lock().unwrap();
    eprintln!("errors seen by clients: {errors:?}");
    assert!(
        errors
            .keys()
            .all(|e| e.ends_with("40001") || e.ends_with("40P01") || e.ends_with("55000")),
        "only retryable errors: {errors:?}"
    );
}

/// A stale fence is refused on the tenant's node, and the business write of its transaction
/// goes with it.
#[test]
fn a_stale_fence_is_refused_together_with_its_business_write() {
    let Some(cluster) = cluster(&[]) else { return };
    let mut db = cluster.coordinator.client();
    db.batch_execute(
        "CREATE TABLE payments (tenant text NOT NULL, key text NOT NULL, who text NOT NULL); \
         SELECT create_distributed_table('payments', 'tenant', colocate_with => 'idem.keys');",
    )
    .unwrap();
    for path in [Path::Delegated, Path::Coordinator] {
        let tenant = format!("stale-{path:?}");
        let stale = claim_on(&mut db, path, &tenant, "pay", "h", "1 ms")
            .1
            .unwrap();
        thread::sleep(Duration::from_millis(20));
        let current = claim_on(&mut db, path, &tenant, "pay", "h", "1 minute")
            .1
            .unwrap();
        assert!(current > stale);
        for (function, args) in [("idem_complete", ", 200"), ("idem_assert_fence", "")] {
            db.batch_execute("BEGIN").unwrap();
            db.batch_execute(&format!(
                "INSERT INTO payments VALUES ({}, 'pay', 'stale')",
                q(&tenant)
            ))
            .unwrap();
            let sql = format!("{function}({}, 'pay', {stale}{args})", q(&tenant));
            let result = match path {
                Path::Coordinator => simple_one(&mut db, &format!("SELECT (SELECT {sql})::text")),
                _ => simple_one(&mut db, &format!("SELECT {sql}")),
            };
            assert_eq!(
                sqlstate(&result.expect_err("a stale fence")),
                "55000",
                "{path:?} {function}"
            );
            db.batch_execute("ROLLBACK").unwrap();
        }
        db.batch_execute(&format!(
            "BEGIN; INSERT INTO payments VALUES ({t}, 'pay', 'current'); SELECT idem_complete({t}, 'pay', {current}, 200); COMMIT",
            t = q(&tenant)
        ))
        .unwrap();
        let who: Vec<String> = db.column("SELECT who FROM payments WHERE tenant = $1", &[&tenant]);
        assert_eq!(who, ["current"], "{path:?}");
    }
}

fn expired_keys_on_both_workers(cluster: &Cluster, db: &mut Client, per_worker: usize) {
    for tenant in cluster.tenant_per_worker("expiring-") {
        for i in 0..per_worker {
            db.execute(
                "SELECT idem_claim($1, $2, 'h', '1 ms'::interval, '1 ms'::interval)",
                &[&tenant, &format!("gone{i}")],
            )
            .unwrap();
        }
        db.execute(
            "SELECT idem_claim($1, 'kept', 'h', '1 hour'::interval)",
            &[&tenant],
        )
        .unwrap();
    }
}

/// idem_purge() on the coordinator purges the shards of every worker node.
#[test]
fn idem_purge_on_the_coordinator_purges_every_node() {
    let Some(cluster) = cluster(&[]) else { return };
    let mut db = cluster.coordinator.client();
    expired_keys_on_both_workers(&cluster, &mut db, 30);
    thread::sleep(Duration::from_millis(50));
    for worker in &cluster.workers {
        assert_eq!(local_keys(worker), 31);
    }
    let purged: i64 = db.query_one("SELECT idem_purge()", &[]).unwrap().get(0);
    assert_eq!(purged, 60);
    for worker in &cluster.workers {
        assert_eq!(local_keys(worker), 1, "the live key stays");
    }
    let purged_counted: i64 = db
        .query_one(
            "SELECT sum(keys_purged)::bigint FROM idem_cluster_counters()",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(purged_counted, 60);
}

/// Each node's purge worker purges the shards placed on that node, by itself.
#[test]
fn each_nodes_purge_worker_purges_its_shards() {
    let Some(cluster) = cluster(&[
        "pg_idem.database = 'postgres'",
        "pg_idem.purge_interval = '200ms'",
    ]) else {
        return;
    };
    let mut db = cluster.coordinator.client();
    expired_keys_on_both_workers(&cluster, &mut db, 25);
    for worker in &cluster.workers {
        wait_for("the node's purge worker", Duration::from_secs(30), || {
            local_keys(worker) == 1
        });
        let purged: i64 = worker
            .client()
            .query_one("SELECT total_keys FROM idem_purge_status()", &[])
            .unwrap()
            .get(0);
        assert_eq!(purged, 25, "this node's worker purged this node's keys");
    }
}

/// The counters of every node, read on the coordinator; key counts are cluster-wide there.
#[test]
fn statistics_read_on_the_coordinator_cover_the_cluster() {
    let Some(cluster) = cluster(&[]) else { return };
    let mut db = cluster.coordinator.client();
    let tenants = cluster.tenant_per_worker("stats-");
    for tenant in &tenants {
        for i in 0..5 {
            claim_on(
                &mut db,
                Path::Delegated,
                tenant,
                &format!("d{i}"),
                "h",
                "1 minute",
            );
            claim_on(
                &mut db,
                Path::Coordinator,
                tenant,
                &format!("c{i}"),
                "h",
                "1 minute",
            );
        }
        claim_on(&mut db, Path::Delegated, tenant, "d0", "other", "1 minute");
    }
    let rows = db
        .query(
            "SELECT nodeport, claims, mismatches FROM idem_cluster_counters()",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), 3, "one row per node");
    let by_port: HashMap<i32, (i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    assert_eq!(
        by_port[&i32::from(cluster.coordinator.port)],
        (10, 0),
        "the coordinator path"
    );
    for worker in &cluster.workers {
        assert_eq!(
            by_port[&i32::from(worker.port)],
            (5, 1),
            "the delegated claims of its tenant"
        );
    }
    let in_progress: i64 = db
        .query_one("SELECT keys_in_progress FROM idem_stats()", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        in_progress, 20,
        "idem_stats() counts the keys of every node"
    );
    // and its counters are the sum of every node's: 20 claims, 10 of them delegated to the
    // workers, 2 mismatches there; all three nodes answered
    let row = db
        .query_one(
            "SELECT claims, mismatches, counters_nodes, counters_missing_nodes FROM idem_stats()",
            &[],
        )
        .unwrap();
    let totals: (i64, i64, i32, Vec<String>) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(totals, (20, 2, 3, vec![]), "cluster-wide counters");
    let per_tenant: Vec<(String, i64, i64)> = db
        .query(
            "SELECT tenant, claims, mismatches FROM idem_tenant_stats() ORDER BY tenant",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let mut expected: Vec<(String, i64, i64)> =
        tenants.iter().map(|t| (t.clone(), 10, 1)).collect();
    expected.sort();
    assert_eq!(
        per_tenant, expected,
        "per-tenant counters of every node, summed"
    );
    // messages consumed on the workers, delegated by tenant, are counted there and in the sum
    for tenant in &tenants {
        for key in ["m1", "m2", "m1"] {
            db.execute("SELECT idem_consume($1, $2)", &[tenant, &key])
                .unwrap();
        }
    }
    let row = db
        .query_one("SELECT consumed, consume_duplicates FROM idem_stats()", &[])
        .unwrap();
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (4, 2));
    // a node that does not answer is left out of the sum, and named
    let stopped = &cluster.workers[1];
    stopped.stop("fast");
    let row = db
        .query_one(
            "SELECT claims, keys_in_progress, counters_nodes, counters_missing_nodes FROM idem_stats()",
            &[],
        )
        .unwrap();
    let partial: (i64, i64, i32, Vec<String>) = (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        partial,
        (15, 10, 2, vec![format!("127.0.0.1:{}", stopped.port)]),
        "the sum of the nodes that answered, and the one that did not"
    );
    stopped.start_again();
    let tenants_seen: i64 = db
        .query_one(
            "SELECT count(*) FROM idem_tenant_stats() WHERE keys_in_progress = 10",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tenants_seen, 2);
    // stalled keys are listed from every node: the 1 ms leases below pass at once
    for tenant in &tenants {
        claim_on(&mut db, Path::Delegated, tenant, "stalls", "h", "1 ms");
    }
    thread::sleep(Duration::from_millis(20));
    let stalled: Vec<String> = db.column("SELECT tenant FROM idem_stalled() ORDER BY tenant", &[]);
    let mut expected = tenants.clone();
    expected.sort();
    assert_eq!(stalled, expected);
}

/// A worker node down: its tenants' claims fail with a connection error, the others go on;
/// back up, nothing committed is lost and leases run out as usual. A coordinator restart loses
/// nothing either.
#[test]
fn a_node_down_stops_only_its_tenants_and_loses_nothing() {
    let Some(cluster) = cluster(&[]) else { return };
    let mut db = cluster.coordinator.client();
    let tenants = cluster.tenant_per_worker("fault-");
    let (up, down) = (&tenants[0], &tenants[1]);
    let mut done = HashMap::new();
    for tenant in &tenants {
        let fence = claim_on(&mut db, Path::Delegated, tenant, "done", "h", "1 minute")
            .1
            .unwrap();
        ok(
            &mut db,
            Path::Delegated,
            &format!(
                "idem_complete({}, 'done', {fence}, 200, '{{\"n\": 1}}')",
                q(tenant)
            ),
        );
        done.insert(tenant.clone(), fence);
        claim_on(&mut db, Path::Delegated, tenant, "leased", "h", "2 seconds");
    }
    let stopped = cluster.node_of(down);
    for i in 0..3 {
        db.execute(
            "SELECT idem_claim($1, $2, 'h', '1 ms'::interval, '1 ms'::interval)",
            &[up, &format!("expiring{i}")],
        )
        .unwrap();
    }
    stopped.stop("fast");
    // idem_purge() on the coordinator purges the node that is up, and warns about the other
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let mut config: postgres::Config = cluster.coordinator.conninfo("postgres").parse().unwrap();
    let seen = warnings.clone();
    config.notice_callback(move |notice| {
        seen.lock().unwrap().push((
            notice.code().code().to_string(),
            notice.message().to_string(),
        ))
    });
    let mut watched = config.connect(NoTls).unwrap();
    thread::sleep(Duration::from_millis(20));
    let purged: i64 = watched
        .query_one("SELECT idem_purge()", &[])
        .unwrap()
        .get(0);
    assert_eq!(purged, 3, "the node that is up was purged");
    let warnings = warnings.lock().unwrap().clone();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].0, "08006");
    assert!(
        warnings[0]
            .1
            .contains(&format!("127.0.0.1:{}", stopped.port)),
        "the warning names the node: {warnings:?}"
    );
    for path in [Path::Delegated, Path::Coordinator] {
        let error = call(
            &mut db,
            path,
            &format!("idem_claim({}, 'new', 'h')", q(down)),
        )
        .expect_err("the tenant's node is down");
        let state = sqlstate(&error);
        let text = format!("{error:?}");
        assert!(
            state.starts_with("08") || state == "XX000" && text.contains("connection"),
            "{path:?}: {state} {text}"
        );
        assert!(
            text.contains(&stopped.port.to_string()),
            "{path:?}: the error names the node: {text}"
        );
        let mut fresh = cluster.coordinator.client();
        let (outcome, ..) = claim_on(
            &mut fresh,
            path,
            up,
            &format!("while-down-{path:?}"),
            "h",
            "1 minute",
        );
        assert_eq!(
            outcome, "claimed",
            "{path:?}: tenants on the other node go on"
        );
        db = fresh;
    }
    stopped.start_again();
    let mut db = cluster.coordinator.client();
    for tenant in &tenants {
        let (outcome, _, _, code, body) =
            claim_on(&mut db, Path::Delegated, tenant, "done", "h", "1 minute");
        assert_eq!(
            (outcome.as_str(), code, body.as_deref()),
            ("completed", Some(200), Some("{\"n\": 1}"))
        );
    }
    thread::sleep(Duration::from_millis(2100));
    for tenant in &tenants {
        let (outcome, _, attempt, ..) =
            claim_on(&mut db, Path::Delegated, tenant, "leased", "h", "1 minute");
        assert_eq!(
            (outcome.as_str(), attempt),
            ("claimed", Some(2)),
            "{tenant}: not stuck past its lease"
        );
    }
    cluster.coordinator.stop("immediate");
    cluster.coordinator.start_again();
    let mut db = cluster.coordinator.client();
    for tenant in &tenants {
        let (outcome, ..) = claim_on(&mut db, Path::Coordinator, tenant, "done", "h", "1 minute");
        assert_eq!(outcome, "completed");
        assert_eq!(
            claim_on(&mut db, Path::Delegated, tenant, "leased", "h", "1 minute").0,
            "in_progress"
        );
    }
    assert_eq!(
        claim_on(
            &mut db,
            Path::Delegated,
            up,
            "while-down-Delegated",
            "h",
            "1 minute"
        )
        .0,
        "in_progress"
    );
}

/// Tenant grants hold on every node: granted before and after distributing, checked where the
/// function runs (on the worker node when delegated), and a revoke counts at once everywhere.
#[test]
fn tenant_grants_hold_on_every_node() {
    let Some(cluster) = cluster_distributed(None, &["pg_idem.tenant_grants = on"]) else {
        return;
    };
    let mut db = cluster.coordinator.client();
    db.batch_execute(
        "CREATE ROLE app LOGIN; \
         SELECT idem_grant_tenant('app', 'acme'); \
         SELECT idem_distribute(8); \
         SELECT idem_grant_tenant('app', 'globex');",
    )
    .unwrap();
    let conninfo = format!(
        "host=127.0.0.1 port={} user=app dbname=postgres connect_timeout=10",
        cluster.coordinator.port
    );
    let mut app = Client::connect(&conninfo, NoTls).unwrap();
    for path in PATHS {
        for tenant in ["acme", "globex"] {
            let key = format!("{path:?}");
            assert_eq!(
                claim_on(&mut app, path, tenant, &key, "h", "1 minute").0,
                "claimed"
            );
        }
        let denied = call(&mut app, path, "idem_claim('initech', 'k', 'h')").expect_err("no grant");
        assert_eq!(sqlstate(&denied), "42501", "{path:?}");
    }
    db.batch_execute("SELECT idem_revoke_tenant('app', 'acme')")
        .unwrap();
    let listed: Vec<String> = db.column(
        "SELECT role::text || '/' || tenant FROM idem_tenant_grants()",
        &[],
    );
    assert_eq!(listed, ["app/globex"]);
    for path in PATHS {
        let denied =
            call(&mut app, path, "idem_claim('acme', 'after-revoke', 'h')").expect_err("revoked");
        assert_eq!(
            sqlstate(&denied),
            "42501",
            "{path:?}: the revoke counts on every node"
        );
    }
}

/// idem_cluster_counters() runs a command on every node with the extension owner's rights: a
/// database owner who renames pg_idem's schema and plants a look-alike idem_counters() under the
/// old name gains nothing, and the coordinator still reports its real counters.
#[test]
fn cluster_counters_never_run_a_planted_look_alike() {
    let Some(cluster) = cluster(&[]) else { return };
    let mut db = cluster.coordinator.client();
    claim_on(&mut db, Path::Coordinator, "acme", "k", "h", "1 minute");
    db.batch_execute(
        "CREATE ROLE evil LOGIN NOSUPERUSER; ALTER SCHEMA public OWNER TO evil; \
         GRANT pg_monitor TO evil; GRANT CREATE ON DATABASE postgres TO evil",
    )
    .unwrap();
    let conninfo = format!(
        "host=127.0.0.1 port={} user=evil dbname=postgres connect_timeout=10",
        cluster.coordinator.port
    );
    let mut evil = Client::connect(&conninfo, NoTls).unwrap();
    evil.batch_execute(
        "SET citus.enable_ddl_propagation = off; \
         ALTER SCHEMA public RENAME TO old_public; CREATE SCHEMA public; \
         CREATE FUNCTION public.idem_counters(OUT claims bigint, OUT replays_completed bigint, \
             OUT replays_failed bigint, OUT in_progress bigint, OUT mismatches bigint, \
             OUT takeovers bigint, OUT stale_fences bigint, OUT stale_keys bigint, \
             OUT keys_purged bigint, OUT since timestamptz) RETURNS SETOF record \
             LANGUAGE plpgsql AS $$ BEGIN ALTER ROLE evil SUPERUSER; RETURN; END $$;",
    )
    .unwrap();
    for role in ["evil", "postgres"] {
        let conninfo = format!(
            "host=127.0.0.1 port={} user={role} dbname=postgres connect_timeout=10",
            cluster.coordinator.port
        );
        let mut caller = Client::connect(&conninfo, NoTls).unwrap();
        let claims: Option<i64> = caller
            .query_one(
                "SELECT claims FROM old_public.idem_cluster_counters() WHERE nodeport = $1",
                &[&i32::from(cluster.coordinator.port)],
            )
            .unwrap_or_else(|e| panic!("idem_cluster_counters() as {role}: {e:?}"))
            .get(0);
        assert_eq!(claims, Some(1), "the coordinator's real counters");
    }
    let superuser: bool = db
        .query_one("SELECT rolsuper FROM pg_roles WHERE rolname = 'evil'", &[])
        .unwrap()
        .get(0);
    assert!(
        !superuser,
        "the schema owner became superuser through idem_cluster_counters()"
    );
}

/// The update to 0.5.0 on a cluster that distributes idem.keys (installed at 0.4.0 through
/// every upgrade script, which also proves they run on a cluster: a temporary table in the 0.4.0
/// script made the nodes' prepared transaction fail): the NOT NULL constraints a message row
/// needs gone are gone on every shard too, and messages are narrow rows through every path; a
/// whole row consumed before answers alike.
#[test]
fn the_update_on_a_cluster_narrows_message_rows_on_every_shard() {
    let Some(cluster) = cluster_distributed(None, &[]) else {
        return;
    };
    install_released_script();
    let mut db = cluster.coordinator.client();
    db.batch_execute(&format!(
        "DROP EXTENSION pg_idem; CREATE EXTENSION pg_idem VERSION '{RELEASED}'; \
         ALTER EXTENSION pg_idem UPDATE TO '0.4.0'; SELECT idem_distribute(8)"
    ))
    .unwrap();
    let narrow = |db: &mut Client, key: &str| -> bool {
        db.query_one(
            "SELECT fence IS NULL AND expires_at IS NULL AND ttl IS NULL \
               FROM idem.keys WHERE tenant = 'acme' AND key = $1",
            &[&key],
        )
        .unwrap()
        .get(0)
    };
    let consumed: bool = db
        .query_one("SELECT idem_consume('acme', 'before')", &[])
        .unwrap()
        .get(0);
    assert!(consumed);
    assert!(!narrow(&mut db, "before"), "a whole row under 0.4.0");
    db.batch_execute("ALTER EXTENSION pg_idem UPDATE").unwrap();
    let not_null_on_shards: i64 = db
        .query_one(
            "SELECT sum(result::bigint)::bigint FROM run_command_on_shards('idem.keys', \
               $$SELECT count(*) FROM pg_attribute WHERE attrelid = '%s'::regclass \
                  AND attname IN ('fence', 'claimed_at', 'expires_at', 'ttl', 'attempt', \
                                  'request_hash') AND attnotnull$$)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        not_null_on_shards, 0,
        "every shard allows NULL after the update"
    );
    for path in PATHS {
        let key = format!("after-{path:?}");
        let new = ok(
            &mut db,
            path,
            &format!("idem_consume('acme', {})::int", q(&key)),
        );
        assert_eq!(new.as_deref(), Some("1"), "{path:?}");
        assert!(narrow(&mut db, &key), "{key}: a narrow row");
    }
    for key in [
        "before",
        "after-Delegated",
        "after-InTransaction",
        "after-Coordinator",
    ] {
        for path in PATHS {
            let again = ok(
                &mut db,
                path,
                &format!("idem_consume('acme', {})::int", q(key)),
            );
            assert_eq!(
                again.as_deref(),
                Some("0"),
                "{key} was processed ({path:?})"
            );
            let outcome = ok(
                &mut db,
                path,
                &format!("(idem_claim('acme', {}, '')).outcome", q(key)),
            );
            assert_eq!(outcome.as_deref(), Some("completed"), "{key} ({path:?})");
        }
    }
}
