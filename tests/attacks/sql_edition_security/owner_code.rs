//! Maintenance running a table owner's code (security-restricted operations): a superuser's,
//! the database owner's and autovacuum's maintenance lend no tenant to it.

use super::*;

/// bank_app may act on tenant 'bank' (whose order is paid and completed); mallory on none,
/// but owns a table whose expression index calls pg_idem once armed: it forgets bank's order
/// and consumes bank's message, and counts in sequences whether pg_idem let it (a function
/// declared IMMUTABLE may not INSERT), as in tests/attacks/tenant_boundary.rs.
fn bank_and_mallorys_trap(server: &Server) {
    server
        .client()
        .batch_execute(
            "CREATE ROLE bank_app LOGIN; CREATE ROLE mallory LOGIN; \
             CREATE SCHEMA mallory_s AUTHORIZATION mallory",
        )
        .unwrap();
    grant(server, "bank_app", "bank");
    tenant_grants_on(server);
    let mut mallory = connect(server, "mallory", "postgres");
    mallory
        .batch_execute(
            "GRANT USAGE ON SCHEMA mallory_s TO PUBLIC; \
             CREATE TABLE mallory_s.armed (on_ boolean); \
             CREATE SEQUENCE mallory_s.stole; CREATE SEQUENCE mallory_s.denied; \
             CREATE SEQUENCE mallory_s.purged; \
             CREATE FUNCTION mallory_s.steal(x int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$ \
             DECLARE n bigint; \
             BEGIN \
               IF EXISTS (SELECT 1 FROM mallory_s.armed) THEN \
                 BEGIN \
                   PERFORM public.idem_forget('bank', 'paid-order'); \
                   PERFORM public.idem_consume('bank', 'message-1'); \
                   PERFORM pg_catalog.nextval('mallory_s.stole'); \
                 EXCEPTION WHEN insufficient_privilege THEN \
                   PERFORM pg_catalog.nextval('mallory_s.denied'); \
                 END; \
                 BEGIN \
                   n := public.idem_purge(); \
                   IF n > 0 THEN PERFORM pg_catalog.setval('mallory_s.purged', n); END IF; \
                 EXCEPTION WHEN insufficient_privilege THEN NULL; \
                 END; \
               END IF; \
               RETURN x; \
             END $$; \
             CREATE TABLE mallory_s.bait (x int); \
             INSERT INTO mallory_s.bait SELECT g FROM generate_series(1, 100) g; \
             CREATE INDEX bait_steal ON mallory_s.bait (mallory_s.steal(x)); \
             CREATE INDEX bait_plain ON mallory_s.bait (x); \
             CREATE MATERIALIZED VIEW mallory_s.mv AS SELECT mallory_s.steal(x) AS y FROM mallory_s.bait",
        )
        .unwrap();
}

/// bank's order paid and completed, its message not consumed, and an expired key of bank's;
/// mallory's counters reset and its trap armed.
fn arm(server: &Server) {
    let mut admin = connect(server, ADMIN, "postgres");
    admin
        .batch_execute("DELETE FROM idem.keys WHERE tenant = 'bank'")
        .unwrap();
    let mut bank = connect(server, "bank_app", "postgres");
    assert_eq!(
        claim_into(&mut bank, "f", "idem_claim('bank', 'paid-order', 'h')"),
        "claimed"
    );
    one(
        &mut bank,
        &format!(
            "SELECT idem_complete('bank', 'paid-order', {}, 200, '{{\"charged\": 100}}')",
            fence("f")
        ),
    );
    assert_eq!(
        claim_into(
            &mut bank,
            "e",
            "idem_claim('bank', 'expired', 'h', '1 millisecond', '1 millisecond')"
        ),
        "claimed"
    );
    one(
        &mut bank,
        &format!(
            "SELECT idem_complete('bank', 'expired', {}, 200)",
            fence("e")
        ),
    );
    std::thread::sleep(Duration::from_millis(20));
    let mut mallory = connect(server, "mallory", "postgres");
    mallory
        .batch_execute(
            "ALTER SEQUENCE mallory_s.stole RESTART; ALTER SEQUENCE mallory_s.denied RESTART; \
             ALTER SEQUENCE mallory_s.purged RESTART; \
             DELETE FROM mallory_s.armed; INSERT INTO mallory_s.armed VALUES (true)",
        )
        .unwrap();
}

/// What the trap did: "stole", "denied" (both or neither), "purged bank's expired key".
fn trap_log(server: &Server) -> Vec<String> {
    let mut mallory = connect(server, "mallory", "postgres");
    let mut log: Vec<String> = ["denied", "stole"]
        .into_iter()
        .filter(|what| {
            one(
                &mut mallory,
                &format!("SELECT is_called FROM mallory_s.{what}"),
            ) == "t"
        })
        .map(str::to_string)
        .collect();
    let mut admin = connect(server, ADMIN, "postgres");
    let bank = one(
        &mut admin,
        "SELECT string_agg(key, ',' ORDER BY key) FROM idem.keys WHERE tenant = 'bank'",
    );
    if !bank.contains("paid-order") {
        log.push("forgot bank's paid order".into());
    }
    if bank.contains("message-1") {
        log.push("consumed bank's message".into());
    }
    if !bank.contains("expired") {
        log.push("purged bank's expired key".into());
    }
    log
}

/// A superuser's maintenance of mallory's table (ANALYZE, VACUUM FULL, REINDEX, CLUSTER,
/// CREATE INDEX, REFRESH MATERIALIZED VIEW) runs mallory's index expression as mallory inside
/// a security-restricted operation: natively mallory's grants decide there (it has none). The
/// SQL edition cannot learn that role and refuses every tenant there: the superuser's own
/// rights must never be lent.
///
/// Fails: idem.check_access returns for a superuser session before it probes for a
/// security-restricted operation, and idem.purgeable_tenants never probes.
#[test]
fn a_superusers_maintenance_lends_no_tenant_to_the_table_owners_code() {
    let server = plain_server(&[]);
    bank_and_mallorys_trap(&server);
    let mut failures = Vec::new();
    for (i, maintenance) in [
        "ANALYZE mallory_s.bait",
        "VACUUM FULL mallory_s.bait",
        "REINDEX TABLE mallory_s.bait",
        "CLUSTER mallory_s.bait USING bait_plain",
        "CREATE INDEX ON mallory_s.bait (mallory_s.steal(x + $I))",
        "REFRESH MATERIALIZED VIEW mallory_s.mv",
    ]
    .into_iter()
    .enumerate()
    {
        arm(&server);
        let maintenance = maintenance.replace("$I", &i.to_string());
        server.client().batch_execute(&maintenance).unwrap();
        let log = trap_log(&server);
        if log != ["denied"] {
            failures.push(format!("{maintenance}: {log:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert_no_crash(&server);
}

/// The same maintenance started by the database's owner (pg_idem's owner here, no superuser):
/// refused, as natively.
#[test]
fn the_database_owners_maintenance_lends_no_tenant() {
    let server = plain_server(&[]);
    bank_and_mallorys_trap(&server);
    if major() >= 17 {
        // since 17 the database's owner maintains others' tables through pg_maintain
        server
            .client()
            .batch_execute(&format!("GRANT pg_maintain TO {ADMIN}"))
            .unwrap();
    }
    for maintenance in ["ANALYZE", "ANALYZE mallory_s.bait"] {
        arm(&server);
        connect(&server, ADMIN, "postgres")
            .batch_execute(maintenance)
            .unwrap();
        assert_eq!(trap_log(&server), ["denied"], "{maintenance}");
    }
    assert_no_crash(&server);
}

/// Autovacuum's ANALYZE runs mallory's index expression as mallory in a security-restricted
/// operation, in a session whose user is the bootstrap superuser: mallory triggers it on its
/// own table, with no superuser involved.
#[test]
fn autovacuum_lends_no_tenant_to_the_table_owners_code() {
    let server = plain_server(&["autovacuum_naptime = 1"]);
    bank_and_mallorys_trap(&server);
    arm(&server);
    let mut mallory = connect(&server, "mallory", "postgres");
    mallory
        .batch_execute(
            "ALTER TABLE mallory_s.bait SET (autovacuum_analyze_threshold = 1, \
                                             autovacuum_analyze_scale_factor = 0); \
             INSERT INTO mallory_s.bait SELECT g FROM generate_series(1, 100) g",
        )
        .unwrap();
    let mut db = server.client();
    wait_for(
        "autovacuum to analyze mallory's table",
        Duration::from_secs(90),
        || {
            one(
                &mut db,
                "SELECT last_autoanalyze IS NOT NULL FROM pg_stat_user_tables \
                 WHERE relid = 'mallory_s.bait'::regclass",
            ) == "t"
        },
    );
    assert_eq!(trap_log(&server), ["denied"]);
    assert_no_crash(&server);
}
