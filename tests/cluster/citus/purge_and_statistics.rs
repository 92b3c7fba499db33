//! The purge (idem_purge on the coordinator, each node's worker) and the statistics read on the
//! coordinator.

use super::*;

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
