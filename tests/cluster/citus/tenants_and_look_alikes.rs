//! Tenant grants on every node, and the cluster's counters never run a planted look-alike.

use super::*;

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
