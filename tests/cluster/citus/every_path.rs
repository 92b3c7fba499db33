//! Every function answers on the cluster as on one server, through each of the three paths a
//! call reaches the keys by.

use super::*;

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
