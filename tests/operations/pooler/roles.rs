//! Per-transaction roles and settings: a hostile search_path in one client's transaction, and
//! tenant grants with SET LOCAL ROLE.

use super::*;

// ---------------------------------------------------------------------------------------------
// A hostile search_path in one client's transaction
// ---------------------------------------------------------------------------------------------

const LOOKALIKES: &str = "
    CREATE ROLE app LOGIN;
    -- a DBA that is not a superuser may SET ROLE and give a schema only to a role it is a
    -- member of
    GRANT app TO CURRENT_USER;
    CREATE SCHEMA evil AUTHORIZATION app;
    SET ROLE app;
    CREATE TABLE evil.log (what text);
    CREATE TABLE evil.keys (tenant text, key text, fence bigint);
    CREATE TABLE evil.tenant_grants (role oid, tenant text);
    CREATE FUNCTION evil.trap(what text) RETURNS void LANGUAGE sql
      AS $$ INSERT INTO evil.log VALUES (what) $$;
    CREATE FUNCTION evil.idem_claim(tenant text, key text, request_hash text,
        lease interval DEFAULT NULL, ttl interval DEFAULT NULL)
      RETURNS TABLE (outcome text, fence bigint, attempt int, response_code int,
                     response_body jsonb)
      LANGUAGE plpgsql AS $$ BEGIN PERFORM evil.trap('idem_claim');
        RETURN QUERY SELECT 'claimed'::text, 0::bigint, 1, NULL::int, NULL::jsonb; END $$;
    CREATE FUNCTION evil.idem_complete(text, text, bigint, int, jsonb DEFAULT NULL)
      RETURNS timestamptz LANGUAGE plpgsql AS $$ BEGIN PERFORM evil.trap('idem_complete');
        RETURN now(); END $$;
    CREATE FUNCTION evil.text_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql
      AS $$ BEGIN PERFORM evil.trap('='); RETURN a OPERATOR(pg_catalog.=) b; END $$;
    CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_eq);
    CREATE FUNCTION evil.pg_has_role(name, oid, text) RETURNS boolean LANGUAGE plpgsql
      AS $$ BEGIN PERFORM evil.trap('pg_has_role'); RETURN true; END $$;
    CREATE FUNCTION evil.nextval(regclass) RETURNS bigint LANGUAGE plpgsql
      AS $$ BEGIN PERFORM evil.trap('nextval'); RETURN 1; END $$;
    CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql
      AS $$ BEGIN PERFORM evil.trap('now'); RETURN 'epoch'; END $$;
    RESET ROLE;
    REVOKE app FROM CURRENT_USER;
";

fn search_path_lookalikes(path: Path) {
    let rig = Rig::start(path, LOOKALIKES, &["app"]);
    let t = "sp";
    let mut hostile = rig.bouncer.connect("single", "app");
    let mut next = rig.bouncer.connect("single", "app");
    // the log's owner reads it, past the pooler
    let mut direct = rig.server.client_as("app");
    let log = |direct: &mut Client| -> Vec<String> {
        direct
            .query_typed("SELECT what FROM evil.log", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    for round in 0..3 {
        let key = format!("k{round}");
        // the hostile transaction: look-alikes first, even before pg_catalog; pg_idem's own
        // functions, called qualified, behave as ever
        hostile
            .batch_execute("BEGIN; SET LOCAL search_path = evil, pg_catalog, public")
            .unwrap();
        let hostile_pid = pid(&mut hostile);
        let rows = hostile
            .query_typed(
                "SELECT c.outcome, c.fence FROM public.idem_claim($1, $2, 'h') AS c",
                &[(&t, Type::TEXT), (&key.as_str(), Type::TEXT)],
            )
            .unwrap();
        assert_eq!(rows[0].get::<_, String>(0), "claimed");
        let f: i64 = rows[0].get(1);
        // (the look-alike's is 0; a fresh SQL edition's first fence is 1)
        assert!(f > 0, "a real fence");
        hostile
            .query_typed(
                "SELECT public.idem_complete($1, $2, $3, 200, '{\"round\": 1}'::pg_catalog.jsonb)",
                &[
                    (&t, Type::TEXT),
                    (&key.as_str(), Type::TEXT),
                    (&f, Type::INT8),
                ],
            )
            .unwrap();
        hostile.batch_execute("COMMIT").unwrap();
        assert!(log(&mut direct).is_empty(), "pg_idem ran a look-alike");

        // the next client on the same backend: default search_path, pg_idem's functions
        let path_now = simple_one(&mut next, "SHOW search_path").unwrap();
        assert_eq!(path_now.as_deref(), Some("\"$user\", public"));
        let r = claim(&mut next, t, &key, "h");
        assert_eq!(r.pid, hostile_pid, "the same backend");
        assert_eq!(
            (r.outcome.as_str(), r.body.as_deref()),
            ("completed", Some(r#"{"round": 1}"#))
        );
        let fresh = claim(&mut next, t, &format!("fresh{round}"), "h");
        assert_eq!(fresh.outcome, "claimed");
        assert!(fence(&fresh) > f);
        let mut tx = next.transaction().unwrap();
        let c = claim(&mut tx, t, &format!("tx{round}"), "h");
        effect(&mut tx, t, &format!("tx{round}"), "next");
        complete(&mut tx, t, &format!("tx{round}"), fence(&c), 201, "{}");
        tx.commit().unwrap();
        assert_eq!(
            claim(&mut next, t, &format!("tx{round}"), "other").outcome,
            "mismatch"
        );
        assert!(
            log(&mut direct).is_empty(),
            "a look-alike ran: {:?}",
            log(&mut direct)
        );
    }
    // and the look-alikes do run when a name resolves to them: a leak would have shown
    hostile
        .batch_execute(
            "BEGIN; SET LOCAL search_path = evil, pg_catalog, public; \
             SELECT * FROM idem_claim('x', 'y', 'z'); COMMIT",
        )
        .unwrap();
    assert_eq!(log(&mut direct), ["idem_claim"]);
    rig.assert_path();
}

// ---------------------------------------------------------------------------------------------
// Tenant grants with SET LOCAL ROLE per transaction
// ---------------------------------------------------------------------------------------------

/// The roles, their tenants and pg_idem.tenant_grants on (as the edition under test sets it).
fn tenant_roles() -> String {
    format!(
        "CREATE ROLE app_a NOLOGIN;
         CREATE ROLE app_b NOLOGIN;
         CREATE ROLE authn LOGIN NOINHERIT IN ROLE app_a, app_b;
         SELECT idem_grant_tenant('app_a', 'ta'), idem_grant_tenant('app_b', 'tb');
         {};",
        owner_setting_sql("pg_idem.tenant_grants", Some("on"))
    )
}

/// One transaction as `role` (None: the login role): (backend pid, claim's outcome or SQLSTATE).
fn as_role(db: &mut Client, role: Option<&str>, tenant: &str, key: &str) -> (i32, String) {
    db.batch_execute("BEGIN").unwrap();
    if let Some(role) = role {
        db.batch_execute(&format!("SET LOCAL ROLE {role}")).unwrap();
    }
    let backend = pid(db);
    let answer = match try_claim(db, tenant, key, "h", None) {
        Ok(c) => {
            db.batch_execute("COMMIT").unwrap();
            c.outcome
        }
        Err(e) => {
            db.batch_execute("ROLLBACK").unwrap();
            state_of(&e)
        }
    };
    (backend, answer)
}

fn tenant_grants(path: Path) {
    let rig = Rig::start(path, &tenant_roles(), &["authn"]);
    let mut a = rig.bouncer.connect("single", "authn");
    let mut b = rig.bouncer.connect("single", "authn");
    let mut admin = rig.server.client();
    let setting = match edition() {
        Edition::Native => simple_one(&mut a, "SHOW pg_idem.tenant_grants"),
        // the owner's table, which no client of the pooler may read
        Edition::Sql => simple_one(
            &mut admin,
            "SELECT value FROM idem.settings WHERE name = 'pg_idem.tenant_grants'",
        ),
    };
    assert_eq!(
        setting.unwrap().as_deref(),
        Some("on"),
        "set for the database"
    );

    // clients A and B share the one backend, transaction after transaction, each as its role;
    // every answer is checked as the role the transaction runs as, cached answers included
    let mut backends = std::collections::BTreeSet::new();
    for round in 0..3 {
        let k = |name: &str| format!("{name}-{round}");
        // (client: 0 is A, 1 is B, role, tenant, key, expected)
        let steps = [
            (0, Some("app_a"), "ta", k("a-own"), "claimed"),
            (1, Some("app_b"), "ta", k("b-on-a"), "42501"),
            (1, Some("app_b"), "tb", k("b-own"), "claimed"),
            (0, Some("app_a"), "tb", k("a-on-b"), "42501"),
            (1, None, "tb", k("login-role"), "42501"),
            (0, Some("app_a"), "ta", k("a-own"), "in_progress"),
        ];
        for (client, role, tenant, key, expected) in steps {
            let db = if client == 0 { &mut a } else { &mut b };
            let (backend, answer) = as_role(db, role, tenant, &key);
            assert_eq!(
                answer, expected,
                "round {round}: client {client} as {role:?} claiming {tenant}/{key}"
            );
            backends.insert(backend);
        }
    }
    assert_eq!(
        backends.len(),
        1,
        "A's and B's transactions shared one backend"
    );
    // SET LOCAL ROLE ended with each transaction
    assert_eq!(
        simple_one(&mut b, "SELECT current_user")
            .unwrap()
            .as_deref(),
        Some("authn")
    );

    // SET ROLE ... RESET ROLE inside one transaction: each call checked as the role of its
    // moment; the next transaction on the backend runs as the login role
    b.batch_execute("BEGIN; SET ROLE app_b").unwrap();
    assert_eq!(claim(&mut b, "tb", "set-role", "h").outcome, "claimed");
    b.batch_execute("SAVEPOINT s").unwrap();
    let e = try_claim(&mut b, "ta", "set-role", "h", None).unwrap_err();
    assert_eq!(state_of(&e), "42501");
    b.batch_execute("ROLLBACK TO SAVEPOINT s; RESET ROLE; SAVEPOINT s2")
        .unwrap();
    let e = try_claim(&mut b, "tb", "set-role-2", "h", None).unwrap_err();
    assert_eq!(
        state_of(&e),
        "42501",
        "after RESET ROLE: the NOINHERIT login"
    );
    b.batch_execute("ROLLBACK TO SAVEPOINT s2; SET ROLE app_a")
        .unwrap();
    assert_eq!(claim(&mut b, "ta", "set-role", "h").outcome, "claimed");
    b.batch_execute("RESET ROLE; COMMIT").unwrap();
    assert_eq!(
        simple_one(&mut a, "SELECT current_user")
            .unwrap()
            .as_deref(),
        Some("authn")
    );
    assert_eq!(as_role(&mut a, None, "ta", "after-reset").1, "42501");

    // a revoke counts from the next transaction on, on every backend: warm up both backends of
    // the two-connection pool with app_a's answer for ta, revoke, and ask both again
    let mut p1 = rig.bouncer.connect("postgres", "authn");
    let mut p2 = rig.bouncer.connect("postgres", "authn");
    let both = |p1: &mut Client, p2: &mut Client, key: &str| -> Vec<(i32, String)> {
        // both transactions open at once: two backends
        let mut out = Vec::new();
        for db in [&mut *p1, &mut *p2] {
            db.batch_execute("BEGIN; SET LOCAL ROLE app_a").unwrap();
        }
        for (i, db) in [&mut *p1, &mut *p2].into_iter().enumerate() {
            let backend = pid(db);
            db.batch_execute("SAVEPOINT s").unwrap();
            let answer = match try_claim(db, "ta", &format!("{key}-{i}"), "h", None) {
                Ok(c) => c.outcome,
                Err(e) => state_of(&e),
            };
            db.batch_execute("ROLLBACK TO SAVEPOINT s").unwrap();
            out.push((backend, answer));
        }
        for db in [&mut *p1, &mut *p2] {
            db.batch_execute("COMMIT").unwrap();
        }
        out
    };
    let before = both(&mut p1, &mut p2, "warm");
    assert_ne!(before[0].0, before[1].0, "two backends");
    assert!(before.iter().all(|(_, a)| a == "claimed"), "{before:?}");
    let revoked: bool = admin
        .query_one("SELECT idem_revoke_tenant('app_a', 'ta')", &[])
        .unwrap()
        .get(0);
    assert!(revoked);
    let after = both(&mut p1, &mut p2, "revoked");
    let backends_before: std::collections::BTreeSet<i32> = before.iter().map(|b| b.0).collect();
    let backends_after: std::collections::BTreeSet<i32> = after.iter().map(|b| b.0).collect();
    assert_eq!(backends_before, backends_after, "the same two backends");
    assert!(after.iter().all(|(_, a)| a == "42501"), "{after:?}");
    assert_eq!(
        as_role(&mut a, Some("app_a"), "ta", "revoked-single").1,
        "42501"
    );
    // app_b's grant is untouched
    assert_eq!(as_role(&mut b, Some("app_b"), "tb", "still").1, "claimed");
    rig.assert_path();
}

on_both_paths!(
    search_path_lookalikes,
    search_path_lookalikes_on_the_engine_path,
    search_path_lookalikes_on_the_spi_path
);
on_both_paths!(
    tenant_grants,
    tenant_grants_on_the_engine_path,
    tenant_grants_on_the_spi_path
);
