//! A worker node down stops only its tenants, and a coordinator restart loses nothing.

use super::*;

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
