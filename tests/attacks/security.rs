//! Security: a role without privileges uses every function but cannot touch idem.* directly; a
//! hostile search_path changes no result and gains no rights; tenants never see each other.

use pg_idem_tests::*;

/// A role with LOGIN and nothing else, and its own schema first in its search_path.
fn app_role(server: &Server) {
    server
        .client()
        .batch_execute(
            "CREATE ROLE app LOGIN; \
             GRANT app TO CURRENT_USER; \
             CREATE SCHEMA app AUTHORIZATION app; \
             REVOKE app FROM CURRENT_USER; \
             ALTER ROLE app SET search_path = app, pg_catalog, public",
        )
        .expect("create role");
}

fn fence_of(c: &Claim) -> i64 {
    c.fence.expect("fence")
}

#[test]
fn unprivileged_role_uses_every_function_but_not_the_tables() {
    let server = Server::start(&[]);
    app_role(&server);
    let mut app = server.client_as("app");

    let c = claim(&mut app, "t", "k", "h");
    assert_eq!(c.outcome, "claimed");
    app.execute(
        "SELECT idem_heartbeat('t', 'k', $1, '1 min')",
        &[&fence_of(&c)],
    )
    .unwrap();
    app.execute(
        "SELECT idem_checkpoint('t', 'k', $1, 'step-1', '{\"a\": 1}')",
        &[&fence_of(&c)],
    )
    .unwrap();
    app.execute("SELECT idem_assert_fence('t', 'k', $1)", &[&fence_of(&c)])
        .unwrap();
    complete(&mut app, "t", "k", fence_of(&c), 201, "{}");
    assert_eq!(claim(&mut app, "t", "k", "h").outcome, "completed");
    let f = claim(&mut app, "t", "k2", "h");
    app.execute(
        "SELECT idem_fail_final('t', 'k2', $1, 402)",
        &[&fence_of(&f)],
    )
    .unwrap();
    let r = claim(&mut app, "t", "k3", "h");
    app.execute("SELECT idem_release('t', 'k3', $1)", &[&fence_of(&r)])
        .unwrap();
    app.query_one("SELECT idem_forget('t', 'k2')", &[]).unwrap();
    app.query_one("SELECT idem_purge()", &[]).unwrap();
    app.query_one("SELECT idem_request_hash('{\"a\": 1}'), idem_request_hash('POST', '/x', '{}'), idem_new_key()", &[])
        .unwrap();
    app.query(
        "SELECT * FROM idem_claim_many('t', ARRAY['m1', 'm2'], ARRAY['h', 'h'])",
        &[],
    )
    .unwrap();
    app.query_one("SELECT * FROM idem_claim_seq('t', 'stream', 1)", &[])
        .unwrap();
    app.query_one(
        "SELECT idem_watermark('t', 'stream'), idem_reset_watermark('t', 'stream', 0)",
        &[],
    )
    .unwrap();
    app.query_one("SELECT idem_downstream_key('t', 'k', 'charge')", &[])
        .unwrap();

    for sql in [
        "SELECT * FROM idem.keys",
        "SELECT * FROM idem.watermarks",
        "INSERT INTO idem.keys (tenant, key) VALUES ('t', 'x')",
        "UPDATE idem.keys SET response_code = 500",
        "DELETE FROM idem.keys",
        "TRUNCATE idem.keys",
        "SELECT nextval('idem.fence_seq')",
        "SELECT setval('idem.fence_seq', 1)",
        "CREATE TABLE idem.mine (x int)",
        "SELECT * FROM idem_stats()",
        "SELECT * FROM idem_stalled()",
        "SELECT idem_stats_reset()",
        "SELECT * FROM idem_tenant_counters()",
    ] {
        let err = app.batch_execute(sql).unwrap_err();
        assert_eq!(sqlstate(&err), "42501", "{sql} must be refused: {err:?}");
    }
    // pg_monitor members read the statistics, not the keys
    server
        .client()
        .batch_execute("GRANT pg_monitor TO app")
        .unwrap();
    let mut monitor = server.client_as("app");
    monitor
        .query_one("SELECT * FROM idem_stats()", &[])
        .unwrap();
    monitor
        .query("SELECT * FROM idem_tenant_stats()", &[])
        .unwrap();
    monitor
        .query("SELECT * FROM idem_purge_status()", &[])
        .unwrap();
    assert_eq!(
        sqlstate(
            &monitor
                .batch_execute("SELECT * FROM idem.keys")
                .unwrap_err()
        ),
        "42501"
    );
}

/// A condition on `p` (pg_proc) that holds for pg_idem's functions: the extension's members
/// natively; in the SQL edition's plain install (no extension) those of schema idem and the
/// idem_* of schema public.
fn is_pg_idem_function() -> &'static str {
    match edition() {
        Edition::Native => {
            "p.oid IN (SELECT d.objid FROM pg_depend d \
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_idem' \
              WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e')"
        }
        Edition::Sql => {
            "(p.pronamespace = 'idem'::regnamespace \
              OR (p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem\\_%'))"
        }
    }
}

#[test]
fn definer_functions_pin_their_search_path() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let definers: i64 = db
        .query_one(
            &format!(
                "SELECT count(*) FROM pg_proc p WHERE {} AND p.prosecdef",
                is_pg_idem_function()
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        definers > 0,
        "no SECURITY DEFINER function of pg_idem found"
    );
    let unpinned: Vec<String> = db
        .column(&format!(
                "SELECT p.oid::regprocedure::text FROM pg_proc p \
                 WHERE {} AND p.prosecdef \
                   AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)",
                is_pg_idem_function()
            ),
            &[],);
    assert!(
        unpinned.is_empty(),
        "SECURITY DEFINER functions without a pinned search_path: {unpinned:?}"
    );
}

#[test]
fn only_the_sql_functions_reading_idem_are_definers() {
    if native_only(
        "the library's C functions run as the caller (SECURITY INVOKER) and switch to the owner \
         in C; in the SQL edition every function is SECURITY DEFINER by design",
    ) {
        return;
    }
    let server = Server::start(&[]);
    let mut db = server.client();
    // The C functions run with the caller's rights and switch to the owner in C where SQL runs
    // (src/pg/owner.rs; the hostile-search-path tests below run every path): none is SECURITY
    // DEFINER nor carries settings of its own. The SQL and PL/pgSQL ones that read idem.* are.
    let by_kind: Vec<(String, String, bool, Option<Vec<String>>)> = db
        .query(
            "SELECT p.proname::text, l.lanname::text, p.prosecdef, p.proconfig FROM pg_proc p \
             JOIN pg_language l ON l.oid = p.prolang \
             JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e' \
             JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_idem' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    for (name, language, secdef, config) in &by_kind {
        if language == "c" {
            assert!(
                !secdef && config.is_none(),
                "{name} (C) should be SECURITY INVOKER without settings"
            );
        }
    }
    let definers: Vec<&str> = by_kind
        .iter()
        .filter(|(_, _, secdef, _)| *secdef)
        .map(|(name, ..)| name.as_str())
        .collect();
    assert_eq!(
        definers,
        [
            "idem_cluster_counters",
            "idem_stalled",
            "idem_stats",
            "idem_tenant_grants",
            "idem_tenant_stats"
        ]
    );
}

/// The role `app` plants look-alikes of everything pg_idem's SQL uses in its own schema, first in
/// its search_path, then calls every function: each one must work as for anybody (no look-alike
/// ever runs: each raises if it does), leave the session's user and search_path as they were,
/// even after an error raised while pg_idem acted as the extension's owner, and give the role
/// no access it did not have.
fn hostile_session_runs_everything(server: &Server) {
    let mut app = server.client_as("app");
    // look-alikes of everything pg_idem's SQL uses; each one fails loudly if it is ever called
    app.batch_execute(
        r#"
        CREATE FUNCTION app.hijack() RETURNS boolean LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'hijacked: a look-alike ran with the caller''s search_path'; END $$;
        CREATE FUNCTION app.text_eq(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT app.hijack()';
        CREATE OPERATOR app.= (LEFTARG = text, RIGHTARG = text, FUNCTION = app.text_eq);
        CREATE FUNCTION app.int8_eq(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT app.hijack()';
        CREATE OPERATOR app.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = app.int8_eq);
        CREATE FUNCTION app.ts_lt(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql AS 'SELECT app.hijack()';
        CREATE OPERATOR app.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = app.ts_lt);
        CREATE FUNCTION app.now() RETURNS timestamptz LANGUAGE sql AS 'SELECT CASE WHEN app.hijack() THEN now() END';
        CREATE FUNCTION app.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS 'SELECT CASE WHEN app.hijack() THEN now() END';
        CREATE FUNCTION app.nextval(regclass) RETURNS bigint LANGUAGE sql AS 'SELECT CASE WHEN app.hijack() THEN 1 END';
        CREATE FUNCTION app.setval(regclass, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT CASE WHEN app.hijack() THEN 1 END';
        CREATE FUNCTION app.pg_sequence_last_value(regclass) RETURNS bigint LANGUAGE sql AS 'SELECT CASE WHEN app.hijack() THEN 1 END';
        CREATE FUNCTION app.octet_length(bytea) RETURNS integer LANGUAGE sql AS 'SELECT CASE WHEN app.hijack() THEN 32 END';
        CREATE FUNCTION app.current_database() RETURNS name LANGUAGE sql AS 'SELECT CASE WHEN app.hijack() THEN ''x''::name END';
        CREATE FUNCTION app.pg_has_role(oid, oid, text) RETURNS boolean LANGUAGE sql AS 'SELECT app.hijack()';
        CREATE TABLE app.keys (tenant text, key text);
        CREATE TABLE app.watermarks (tenant text, stream text);
        CREATE TABLE app.tenant_grants (role oid, tenant text);
        "#,
    )
    .expect("create look-alikes");
    // sanity: the look-alikes do win for the role's own SQL
    assert!(app.batch_execute("SELECT 'a'::text = 'a'::text").is_err());
    let who = |app: &mut Client| -> (String, String) {
        let row = app
            .query_one(
                "SELECT current_user::text, current_setting('search_path')",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let before = who(&mut app);

    let c = claim(&mut app, "t", "k", "h");
    assert_eq!(c.outcome, "claimed");
    assert_eq!(claim(&mut app, "t", "k", "other").outcome, "mismatch");
    assert_eq!(claim(&mut app, "t", "k", "h").outcome, "in_progress");
    app.execute(
        "SELECT idem_heartbeat('t', 'k', $1, '1 min')",
        &[&fence_of(&c)],
    )
    .unwrap();
    app.execute(
        "SELECT idem_checkpoint('t', 'k', $1, 'step', '{\"a\": 1}')",
        &[&fence_of(&c)],
    )
    .unwrap();
    app.execute("SELECT idem_assert_fence('t', 'k', $1)", &[&fence_of(&c)])
        .unwrap();
    complete(&mut app, "t", "k", fence_of(&c), 201, r#"{"ok": true}"#);
    let replay = claim(&mut app, "t", "k", "h");
    assert_eq!(
        (replay.outcome.as_str(), replay.response_code),
        ("completed", Some(201))
    );
    // an error raised in the middle of a call, caught by a savepoint: the session is back to
    // its own user and search_path all the same
    let mut tx = app.transaction().unwrap();
    let mut savepoint = tx.savepoint("refused").unwrap();
    let err = try_complete(&mut savepoint, "t", "k", fence_of(&c), 200, "{}").unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
    savepoint.rollback().unwrap();
    let row = tx
        .query_one(
            "SELECT current_user::text, current_setting('search_path')",
            &[],
        )
        .unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, String>(1)), before);
    tx.commit().unwrap();
    let f = claim(&mut app, "t", "k2", "h");
    app.execute(
        "SELECT idem_fail_final('t', 'k2', $1, 402)",
        &[&fence_of(&f)],
    )
    .unwrap();
    let r = claim(&mut app, "t", "k3", "h");
    app.execute("SELECT idem_release('t', 'k3', $1)", &[&fence_of(&r)])
        .unwrap();
    app.query_one("SELECT idem_forget('t', 'k2')", &[]).unwrap();
    let old = claim_with(&mut app, "t", "short", "h", "1 ms", Some("1 ms"));
    complete(&mut app, "t", "short", fence_of(&old), 200, "{}");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let purged: i64 = app.query_one("SELECT idem_purge()", &[]).unwrap().get(0);
    assert_eq!(purged, 1);
    app.query(
        "SELECT * FROM idem_claim_many('t', ARRAY['m1'], ARRAY['h'])",
        &[],
    )
    .unwrap();
    app.query_one("SELECT * FROM idem_claim_seq('t', 's', 3)", &[])
        .unwrap();
    app.query_one(
        "SELECT idem_watermark('t', 's'), idem_reset_watermark('t', 's', 1)",
        &[],
    )
    .unwrap();
    // the consumer functions (0.4.0): a new message, a duplicate, a batch, a batch completed
    let consumed: bool = app
        .query_one("SELECT idem_consume('t', 'msg-1')", &[])
        .unwrap()
        .get(0);
    assert!(consumed);
    let again: bool = app
        .query_one("SELECT idem_consume('t', 'msg-1')", &[])
        .unwrap()
        .get(0);
    assert!(!again);
    let new: Vec<String> = app.column(
        "SELECT * FROM idem_consume_many('t', ARRAY['msg-1', 'msg-2', 'msg-2'])",
        &[],
    );
    assert_eq!(new, vec!["msg-2".to_string()]);
    let batch: Vec<i64> = app.column(
        "SELECT fence FROM idem_claim_many('t', ARRAY['b1', 'b2'], ARRAY['h', 'h'])",
        &[],
    );
    let completed = app
        .query(
            "SELECT * FROM idem_complete_many('t', ARRAY['b1', 'b2'], $1, ARRAY[200, 201])",
            &[&batch],
        )
        .unwrap();
    assert_eq!(completed.len(), 2);
    assert_eq!(who(&mut app), before, "the session's user and search_path");
    // nothing of the role's own leaked into idem.*, and it gained no access
    for table in ["idem.keys", "idem.watermarks", "idem.tenant_grants"] {
        assert_eq!(
            sqlstate(
                &app.batch_execute(&format!("SELECT * FROM {table}"))
                    .unwrap_err()
            ),
            "42501",
            "{table}"
        );
    }
    let rows: i64 = app
        .query_one(
            "SELECT (SELECT count(*) FROM app.keys) + (SELECT count(*) FROM app.watermarks) \
                  + (SELECT count(*) FROM app.tenant_grants)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
    let mut admin = server.client();
    let owners: Vec<String> = admin
        .column("SELECT DISTINCT r.rolname::text FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner WHERE c.relnamespace = 'idem'::regnamespace", &[]);
    assert_eq!(owners, vec![pg_idem_owner().to_string()]);
    let superuser: bool = admin
        .query_one("SELECT rolsuper FROM pg_roles WHERE rolname = 'app'", &[])
        .unwrap()
        .get(0);
    assert!(!superuser);
}

#[test]
fn hostile_search_path_changes_nothing_and_gains_nothing() {
    // the engine path: no SQL runs but the fence floor's (as the owner)
    let server = Server::start(&[]);
    app_role(&server);
    hostile_session_runs_everything(&server);
}

#[test]
fn hostile_search_path_on_the_spi_path_with_tenant_grants() {
    // a trigger on idem.keys sends every call through SQL statements run as the extension's
    // owner; tenant grants add their look-up (SQL too) to every call
    let server = Server::start(&[]);
    app_role(&server);
    server
        .client()
        .batch_execute(
            "CREATE FUNCTION public.keys_audit() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RETURN NEW; END $$;
             CREATE TRIGGER audit BEFORE INSERT ON idem.keys FOR EACH ROW EXECUTE FUNCTION public.keys_audit();
             SELECT idem_grant_tenant('app', 't');",
        )
        .unwrap();
    server.tenant_grants_on();
    hostile_session_runs_everything(&server);
    // and the check did run: another tenant is refused
    let mut app = server.client_as("app");
    let err = try_claim(&mut app, "other", "k", "h", None, None).unwrap_err();
    assert_eq!(sqlstate(&err), "42501");
}

#[test]
fn hostile_search_path_without_the_preload() {
    if native_only(
        "the library loaded without shared_preload_libraries (CREATE EXTENSION pg_idem); the \
         SQL edition's paths run in the tests above",
    ) {
        return;
    }
    // no shared memory: fences come from nextval on idem.fence_seq, as the owner
    let server = Server::start_bare(&[]);
    server
        .client()
        .batch_execute("CREATE EXTENSION pg_idem")
        .unwrap();
    app_role(&server);
    hostile_session_runs_everything(&server);
}

#[test]
fn a_tenant_never_reads_another_tenants_response() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let a = claim(&mut db, "tenant-a", "order-1", "same-hash");
    complete(
        &mut db,
        "tenant-a",
        "order-1",
        fence_of(&a),
        201,
        r#"{"card": "tenant-a secret"}"#,
    );
    // the same key and the same request hash under another tenant is a new key, not a replay
    let b = claim(&mut db, "tenant-b", "order-1", "same-hash");
    assert_eq!(b.outcome, "claimed");
    assert_eq!(b.response_body, None);
    let b2 = claim(&mut db, "tenant-b", "order-1", "same-hash");
    assert_eq!(b2.outcome, "in_progress");
    assert_eq!(b2.response_body, None);
    // a fence of tenant A cannot finish tenant B's key
    let err = try_complete(&mut db, "tenant-b", "order-1", fence_of(&a), 200, "{}").unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
    // tenant names that differ only in a byte boundary stay apart
    let ab = claim(&mut db, "ab", "c", "h");
    let a_bc = claim(&mut db, "a", "bc", "h");
    assert_eq!(
        (ab.outcome.as_str(), a_bc.outcome.as_str()),
        ("claimed", "claimed")
    );
}
