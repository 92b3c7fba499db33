//! Tenants as an access boundary: with pg_idem.tenant_grants on, a role acts only on the
//! tenants granted to it or to a role whose privileges it has.

use pg_idem_tests::*;

fn setup(server: &Server) {
    server
        .client()
        .batch_execute(
            "CREATE ROLE payments LOGIN; CREATE ROLE orders LOGIN; \
             CREATE ROLE team NOLOGIN; CREATE ROLE member LOGIN IN ROLE team; \
             CREATE ROLE switcher LOGIN NOINHERIT IN ROLE team; \
             SELECT idem_grant_tenant('payments', 'pay'), idem_grant_tenant('orders', 'ord'), \
                    idem_grant_tenant('team', 'shared')",
        )
        .unwrap();
    server.tenant_grants_on();
}

fn denied(db: &mut Client, sql: &str) -> Option<postgres::error::DbError> {
    match db.query(sql, &[]) {
        Ok(_) => None,
        Err(e) => e
            .as_db_error()
            .filter(|d| d.code().code() == "42501")
            .cloned(),
    }
}

#[test]
fn a_role_acts_only_on_its_tenants() {
    let server = Server::start(&[]);
    setup(&server);
    let mut payments = server.client_as("payments");
    for call in TENANT_CALLS {
        let e = denied(&mut payments, &call.replace("$T", "ord")).unwrap_or_else(|| {
            panic!("{call} on another role's tenant was not refused with 42501")
        });
        assert_eq!(e.message(), "permission denied for tenant \"ord\"");
        assert!(e.detail().is_some_and(|d| d.contains("\"payments\"")));
        assert!(e.hint().is_some_and(|h| h.contains("idem_grant_tenant")));
        // its own tenant passes the check (whatever the call itself then answers)
        assert!(
            denied(&mut payments, &call.replace("$T", "pay")).is_none(),
            "{call} on its own tenant"
        );
    }
    // a completed key of one tenant cannot be forgotten by another tenant's role
    let mut orders = server.client_as("orders");
    let c = claim(&mut orders, "ord", "order-1", "h");
    complete(&mut orders, "ord", "order-1", c.fence.unwrap(), 201, "{}");
    assert!(denied(&mut payments, "SELECT idem_forget('ord', 'order-1')").is_some());
    assert_eq!(
        claim(&mut orders, "ord", "order-1", "h").outcome,
        "completed"
    );
}

#[test]
fn grants_follow_role_membership_and_revokes_count_at_once() {
    let server = Server::start(&[]);
    setup(&server);
    let mut member = server.client_as("member");
    assert_eq!(
        claim(&mut member, "shared", "k1", "h").outcome,
        "claimed",
        "through its group"
    );
    // NOINHERIT: the group's grant counts only after SET ROLE
    let mut switcher = server.client_as("switcher");
    assert!(denied(
        &mut switcher,
        "SELECT * FROM idem_claim('shared', 'k2', 'h')"
    )
    .is_some());
    switcher.batch_execute("SET ROLE team").unwrap();
    assert_eq!(claim(&mut switcher, "shared", "k2", "h").outcome, "claimed");
    // a revoke or a lost membership counts from the next statement of a running session
    let mut admin = server.client();
    let revoked: bool = admin
        .query_one("SELECT idem_revoke_tenant('team', 'shared')", &[])
        .unwrap()
        .get(0);
    assert!(revoked);
    assert!(denied(&mut member, "SELECT * FROM idem_claim('shared', 'k3', 'h')").is_some());
    admin
        .execute("SELECT idem_grant_tenant('team', 'shared')", &[])
        .unwrap();
    assert_eq!(claim(&mut member, "shared", "k3", "h").outcome, "claimed");
    admin.batch_execute("REVOKE team FROM member").unwrap();
    assert!(denied(&mut member, "SELECT * FROM idem_claim('shared', 'k4', 'h')").is_some());
    // listing and idempotent grant/revoke
    let again: bool = admin
        .query_one("SELECT idem_grant_tenant('team', 'shared')", &[])
        .unwrap()
        .get(0);
    assert!(!again, "a grant that exists is not new");
    let listed: Vec<(String, String)> = admin
        .query("SELECT role::text, tenant FROM idem_tenant_grants()", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        listed,
        [
            ("orders".into(), "ord".into()),
            ("payments".into(), "pay".into()),
            ("team".into(), "shared".into())
        ]
    );
}

#[test]
fn only_superusers_change_the_setting_or_the_grants() {
    let server = Server::start(&[]);
    setup(&server);
    let mut payments = server.client_as("payments");
    match edition() {
        Edition::Native => {
            let e = payments
                .batch_execute("SET pg_idem.tenant_grants = off")
                .expect_err("a plain role switches the boundary off");
            assert_eq!(sqlstate(&e), "42501");
        }
        Edition::Sql => {
            // the setting is a row of idem.settings, which only pg_idem's owner may change; a
            // session's placeholder of the same name changes nothing
            for sql in [
                "UPDATE idem.settings SET value = 'off' WHERE name = 'pg_idem.tenant_grants'",
                "DELETE FROM idem.settings WHERE name = 'pg_idem.tenant_grants'",
            ] {
                let e = payments
                    .batch_execute(sql)
                    .expect_err("a plain role switches the boundary off");
                assert_eq!(sqlstate(&e), "42501", "{sql}");
            }
            payments
                .batch_execute("SET pg_idem.tenant_grants = off")
                .unwrap();
            assert!(
                denied(&mut payments, "SELECT * FROM idem_claim('ord', 'k', 'h')").is_some(),
                "a placeholder switched the boundary off"
            );
        }
    }
    for call in [
        "SELECT idem_grant_tenant('payments', 'ord')",
        "SELECT idem_revoke_tenant('orders', 'ord')",
        "SELECT * FROM idem_tenant_grants()",
    ] {
        let e = payments.query(call, &[]).expect_err(call);
        assert_eq!(sqlstate(&e), "42501", "{call}");
    }
    // superusers act on every tenant; with the setting off, everyone does
    assert_eq!(
        claim(
            &mut server.superuser_client_db("postgres"),
            "ord",
            "s1",
            "h"
        )
        .outcome,
        "claimed"
    );
    if dba_role() != "postgres" {
        // pg_idem's owner on a managed service is no superuser: no tenant without a grant
        assert!(
            denied(
                &mut server.client(),
                "SELECT * FROM idem_claim('ord', 's3', 'h')"
            )
            .is_some(),
            "pg_idem's owner acted on a tenant it has no grant on"
        );
    }
    server.reset_owner_setting("pg_idem.tenant_grants");
    let mut fresh = server.client_as("payments");
    assert_eq!(claim(&mut fresh, "ord", "s2", "h").outcome, "claimed");
}

/// idem_watermark is PARALLEL SAFE: a parallel plan runs it in its workers and in its leader,
/// where the tenant check answers as anywhere else (natively it once failed there with XX000:
/// its fresh-snapshot read of the grants is refused in parallel mode), a revoke included.
#[test]
fn the_tenant_check_answers_in_a_parallel_query() {
    let server = Server::start(&[]);
    setup(&server);
    let mut payments = server.client_as("payments");
    payments
        .query("SELECT * FROM idem_claim_seq('pay', 's', 7)", &[])
        .unwrap();
    let force = if major() >= 16 {
        "SET debug_parallel_query = on"
    } else {
        "SET force_parallel_mode = on"
    };
    // a table scanned in parallel, calling the function once per row, in the workers and the
    // leader; and the function alone (a worker under a Gather)
    payments
        .batch_execute(&format!(
            "{force}; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; \
             SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 2; \
             CREATE TEMP TABLE streams AS SELECT 's'::text AS s FROM generate_series(1, 1000); \
             ANALYZE streams"
        ))
        .unwrap();
    let watermark = |db: &mut Client, tenant: &str| -> Result<Vec<Option<i64>>, String> {
        [
            format!("SELECT idem_watermark('{tenant}', 's')"),
            format!("SELECT pg_catalog.max(idem_watermark('{tenant}', s)) FROM streams"),
        ]
        .iter()
        .map(|sql| {
            db.query_one(sql.as_str(), &[])
                .map(|row| row.get::<_, Option<i64>>(0))
                .map_err(|e| {
                    e.as_db_error()
                        .map_or_else(|| e.to_string(), |d| d.code().code().to_string())
                })
        })
        .collect()
    };
    assert_eq!(watermark(&mut payments, "pay"), Ok(vec![Some(7), Some(7)]));
    // the plan is parallel where the function is PARALLEL SAFE (natively; the SQL edition's
    // is not, scripts/sql_edition.py); temp tables are not scanned in parallel: a plain table is
    server
        .client()
        .batch_execute(
            "CREATE TABLE public.streams AS SELECT 's'::text AS s FROM generate_series(1, 1000); \
             ANALYZE public.streams; GRANT SELECT ON public.streams TO payments",
        )
        .unwrap();
    payments.batch_execute("DISCARD TEMP").unwrap();
    let plan: Vec<String> = payments.column(
        "EXPLAIN (COSTS OFF) SELECT pg_catalog.max(idem_watermark('pay', s)) FROM streams",
        &[],
    );
    let parallel_safe: bool = payments
        .query_one(
            "SELECT p.proparallel = 's' FROM pg_catalog.pg_proc AS p \
             WHERE p.oid = 'idem_watermark(text, text)'::pg_catalog.regprocedure",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        parallel_safe,
        plan.iter().any(|line| line.contains("Parallel Seq Scan")),
        "{plan:?}"
    );
    assert_eq!(watermark(&mut payments, "pay"), Ok(vec![Some(7), Some(7)]));
    assert_eq!(watermark(&mut payments, "ord"), Err("42501".to_string()));
    server
        .client()
        .batch_execute("SELECT idem_revoke_tenant('payments', 'pay')")
        .unwrap();
    assert_eq!(watermark(&mut payments, "pay"), Err("42501".to_string()));
    let log = server.log();
    assert!(!log.contains("XX000") && !log.contains("PANIC"), "{log}");
}
