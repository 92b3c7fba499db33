//! Tenants as an access boundary under what PostgreSQL itself does behind a role's back:
//! maintenance that runs a table owner's code (ANALYZE by a superuser, autovacuum), a revoke
//! that commits while a session holds an older REPEATABLE READ snapshot, and a purge left open
//! by a role with no tenant at all.

use std::time::{Duration, Instant};

use pg_idem_tests::*;

/// bank_app may act on tenant 'bank'; mallory on no tenant, but owns a schema of its own.
fn setup(server: &Server) {
    server
        .client()
        .batch_execute(
            "CREATE ROLE bank_app LOGIN; CREATE ROLE shop_app LOGIN; CREATE ROLE mallory LOGIN; \
             GRANT mallory TO CURRENT_USER; \
             CREATE SCHEMA mallory_s AUTHORIZATION mallory; \
             REVOKE mallory FROM CURRENT_USER; \
             SELECT idem_grant_tenant('bank_app', 'bank'), idem_grant_tenant('shop_app', 'shop')",
        )
        .unwrap();
    server.tenant_grants_on();
}

/// bank's order, paid and completed: a retry must replay it, never run it again.
fn paid_order(server: &Server) {
    let mut bank = server.client_as("bank_app");
    let c = claim(&mut bank, "bank", "paid-order", "h");
    complete(
        &mut bank,
        "bank",
        "paid-order",
        c.fence.unwrap(),
        200,
        "{\"charged\": 100}",
    );
}

fn still_paid(server: &Server) {
    let mut bank = server.client_as("bank_app");
    let replay = claim(&mut bank, "bank", "paid-order", "h");
    assert_eq!(replay.outcome, "completed", "bank's key was forgotten");
    let unconsumed: bool = bank
        .query_one("SELECT idem_consume('bank', 'message-1')", &[])
        .unwrap()
        .get(0);
    assert!(
        unconsumed,
        "bank's message was marked processed by someone else"
    );
}

/// mallory's table, with an expression index whose (IMMUTABLE-declared) function forgets
/// bank's key and consumes bank's message once armed, and counts whether pg_idem let it (in
/// sequences: a function declared IMMUTABLE may not INSERT).
fn plant_index_function(server: &Server) {
    let mut mallory = server.client_as("mallory");
    mallory
        .batch_execute(
            "CREATE TABLE mallory_s.armed (on_ boolean); \
             CREATE SEQUENCE mallory_s.stole; CREATE SEQUENCE mallory_s.denied; \
             CREATE FUNCTION mallory_s.steal(x int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$ \
             BEGIN \
               IF EXISTS (SELECT 1 FROM mallory_s.armed) THEN \
                 BEGIN \
                   PERFORM public.idem_forget('bank', 'paid-order'); \
                   PERFORM public.idem_consume('bank', 'message-1'); \
                   PERFORM pg_catalog.nextval('mallory_s.stole'); \
                 EXCEPTION WHEN insufficient_privilege THEN \
                   PERFORM pg_catalog.nextval('mallory_s.denied'); \
                 END; \
               END IF; \
               RETURN x; \
             END $$; \
             CREATE TABLE mallory_s.bait (x int); \
             INSERT INTO mallory_s.bait SELECT g FROM generate_series(1, 100) g; \
             CREATE INDEX ON mallory_s.bait (mallory_s.steal(x)); \
             INSERT INTO mallory_s.armed VALUES (true)",
        )
        .unwrap();
}

/// What the planted function did: "stole", "denied", both or neither.
fn log_of(server: &Server) -> Vec<String> {
    let mut db = server.client_as("mallory");
    ["denied", "stole"]
        .into_iter()
        .filter(|what| {
            db.query_one(&format!("SELECT is_called FROM mallory_s.{what}"), &[])
                .unwrap()
                .get(0)
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn a_superusers_analyze_lends_no_tenant_to_the_table_owners_code() {
    let server = Server::start(&[]);
    setup(&server);
    paid_order(&server);
    plant_index_function(&server);
    // the superuser's ANALYZE evaluates the index expression as mallory, in a
    // security-restricted operation: the outer role is the superuser, mallory acts (on a
    // managed service, the service's own maintenance runs as its superuser)
    server
        .superuser_client_db("postgres")
        .batch_execute("ANALYZE mallory_s.bait")
        .unwrap();
    assert_eq!(log_of(&server), vec!["denied".to_string()]);
    still_paid(&server);
}

#[test]
fn autovacuum_lends_no_tenant_to_the_table_owners_code() {
    let server = Server::start(&["autovacuum_naptime = 1"]);
    setup(&server);
    paid_order(&server);
    plant_index_function(&server);
    // mallory sets its own table's thresholds: no superuser involved
    let mut mallory = server.client_as("mallory");
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
        Duration::from_secs(60),
        || {
            db.query_one(
                "SELECT last_autoanalyze IS NOT NULL FROM pg_stat_user_tables \
              WHERE schemaname = 'mallory_s' AND relname = 'bait'",
                &[],
            )
            .unwrap()
            .get(0)
        },
    );
    assert_eq!(log_of(&server), vec!["denied".to_string()]);
    still_paid(&server);
}

#[test]
fn a_revoke_counts_from_the_next_statement_even_inside_an_older_snapshot() {
    let server = Server::start(&[]);
    setup(&server);
    let mut bank = server.client_as("bank_app");
    bank.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .unwrap();
    // the snapshot is taken; the revoke commits after it
    let revoked: bool = server
        .client()
        .query_one("SELECT idem_revoke_tenant('bank_app', 'bank')", &[])
        .unwrap()
        .get(0);
    assert!(revoked);
    let err = bank
        .batch_execute("SELECT * FROM idem_claim('bank', 'inside', 'h')")
        .expect_err("the revoke counts inside the older snapshot");
    assert_eq!(sqlstate(&err), "42501", "{err}");
    bank.batch_execute("ROLLBACK").unwrap();
    // and for good: no answer cached in that transaction outlives it
    for key in ["after-1", "after-2", "after-3"] {
        let err = try_claim(&mut bank, "bank", key, "h", None, None).expect_err(key);
        assert_eq!(sqlstate(&err), "42501", "{key}: {err}");
    }
    // the answer a session cached before a revoke is dropped by it too
    server
        .client()
        .batch_execute("SELECT idem_grant_tenant('bank_app', 'bank')")
        .unwrap();
    claim(&mut bank, "bank", "granted-again", "h");
    bank.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .unwrap();
    server
        .client()
        .batch_execute("SELECT idem_revoke_tenant('bank_app', 'bank')")
        .unwrap();
    let err = bank
        .batch_execute("SELECT * FROM idem_claim('bank', 'cached', 'h')")
        .expect_err("refused");
    assert_eq!(sqlstate(&err), "42501");
}

#[test]
fn an_open_purge_holds_no_other_tenants_keys() {
    // the purge worker paused: its first pass runs as soon as it finds the extension, whatever
    // the interval, and under load that came after the keys below expired, purging shop's
    // before shop could (seen on 16: shop's idem_purge() found 0)
    let server = Server::start(&["pg_idem.purge_interval = 0"]);
    setup(&server);
    let mut bank = server.client_as("bank_app");
    bank.batch_execute("SET statement_timeout = '3s'").unwrap();
    // an expired key, and a live attempt whose ttl passed while its lease runs on
    let c = claim_with(&mut bank, "bank", "expired", "h", "1 ms", Some("1 ms"));
    complete(&mut bank, "bank", "expired", c.fence.unwrap(), 200, "{}");
    let live = claim_with(&mut bank, "bank", "live", "h", "10 min", Some("1 ms"));
    let mut shop = server.client_as("shop_app");
    let s = claim_with(&mut shop, "shop", "expired", "h", "1 ms", Some("1 ms"));
    complete(&mut shop, "shop", "expired", s.fence.unwrap(), 200, "{}");
    std::thread::sleep(Duration::from_millis(50));

    // mallory, with no tenant, purges and leaves its transaction open
    let mut mallory = server.client_as("mallory");
    mallory.batch_execute("BEGIN").unwrap();
    let purged: i64 = mallory
        .query_one("SELECT idem_purge()", &[])
        .unwrap()
        .get(0);
    assert_eq!(purged, 0, "a role with no tenant purges nothing");
    // bank finishes and retries at once: nothing of bank's is locked by mallory
    let started = Instant::now();
    complete(&mut bank, "bank", "live", live.fence.unwrap(), 200, "{}");
    let retried = claim(&mut bank, "bank", "expired", "h");
    assert_eq!(retried.outcome, "claimed");
    assert!(started.elapsed() < Duration::from_secs(2));
    mallory.batch_execute("COMMIT").unwrap();

    // shop purges its own expired keys only, and holds only those
    shop.batch_execute("BEGIN").unwrap();
    let purged: i64 = shop.query_one("SELECT idem_purge()", &[]).unwrap().get(0);
    assert_eq!(purged, 1);
    let c = claim_with(&mut bank, "bank", "expired-2", "h", "1 ms", Some("1 ms"));
    complete(&mut bank, "bank", "expired-2", c.fence.unwrap(), 200, "{}");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        claim(&mut bank, "bank", "expired-2", "h").outcome,
        "claimed"
    );
    shop.batch_execute("COMMIT").unwrap();
    let left: Vec<String> = server
        .client()
        .column("SELECT tenant || '/' || key FROM idem.keys ORDER BY 1", &[]);
    assert_eq!(left, ["bank/expired", "bank/expired-2", "bank/live"]);
    // a superuser purges every tenant (on a managed service only the service has one)
    let c = claim_with(&mut shop, "shop", "expired-3", "h", "1 ms", Some("1 ms"));
    complete(&mut shop, "shop", "expired-3", c.fence.unwrap(), 200, "{}");
    std::thread::sleep(Duration::from_millis(50));
    let purged: i64 = server
        .superuser_client_db("postgres")
        .query_one("SELECT idem_purge()", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        purged, 2,
        "shop's last key and bank's completed one, expired meanwhile"
    );
    amcheck(&mut server.client());
}

/// idem.tenant_grants' primary key rebuilt by a DBA on other columns, or as a partial index:
/// the grants are read without it, and hold as before (no internal error, no grant missed).
#[test]
fn grants_hold_whatever_index_is_named_like_their_primary_key() {
    let server = Server::start(&[]);
    setup(&server);
    for (i, index) in [
        "CREATE UNIQUE INDEX tenant_grants_pkey ON idem.tenant_grants (role pg_catalog.oid_ops, tenant)",
        "CREATE INDEX tenant_grants_pkey ON idem.tenant_grants (role pg_catalog.oid_ops)",
        "CREATE UNIQUE INDEX tenant_grants_pkey ON idem.tenant_grants (tenant, role pg_catalog.oid_ops) \
         WHERE tenant <> 'bank'",
        "CREATE UNIQUE INDEX tenant_grants_pkey ON idem.tenant_grants \
         (tenant COLLATE \"C\", role pg_catalog.oid_ops)",
    ]
    .into_iter()
    .enumerate()
    {
        server
            .client()
            .batch_execute(&format!(
                "ALTER TABLE idem.tenant_grants DROP CONSTRAINT IF EXISTS tenant_grants_pkey; \
                 DROP INDEX IF EXISTS idem.tenant_grants_pkey; {index}"
            ))
            .unwrap();
        let mut bank = server.client_as("bank_app");
        let order = format!("order-{i}");
        let c = try_claim(&mut bank, "bank", &order, "h", None, None).map(|c| c.outcome);
        assert_eq!(
            c.as_ref().map_err(sqlstate),
            Ok(&"claimed".to_string()),
            "{index}: bank_app's own tenant"
        );
        let mut mallory = server.client_as("mallory");
        let denied = try_claim(&mut mallory, "bank", &order, "h", None, None);
        assert_eq!(
            denied.map(|c| c.outcome).map_err(|e| sqlstate(&e)),
            Err("42501".to_string()),
            "{index}: mallory on bank"
        );
    }
}
