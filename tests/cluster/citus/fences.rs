//! Fences across nodes: they grow per key, exactly one business effect per key under
//! concurrency with the business rows colocated, and a stale fence refused together with its
//! business write.

use super::*;

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
