//! Security: a role without privileges uses every function but cannot touch idem.* directly; a
//! hostile search_path changes no result and gains no rights; tenants never see each other.

use pg_idem_tests::*;

/// A role with LOGIN and nothing else, and its own schema first in its search_path.
fn app_role(server: &Server) {
    server
        .client()
        .batch_execute(
            "CREATE ROLE app LOGIN; \
             CREATE SCHEMA app AUTHORIZATION app; \
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

#[test]
fn definer_functions_pin_their_search_path() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let unpinned: Vec<String> = db
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p \
             JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e' \
             JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_idem' \
             WHERE p.prosecdef AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        unpinned.is_empty(),
        "SECURITY DEFINER functions without a pinned search_path: {unpinned:?}"
    );
    let definers: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e' \
             JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_idem' WHERE p.prosecdef",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        definers >= 15,
        "expected the table-touching functions to be SECURITY DEFINER, found {definers}"
    );
}

#[test]
fn hostile_search_path_changes_nothing_and_gains_nothing() {
    let server = Server::start(&[]);
    app_role(&server);
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
        CREATE FUNCTION app.octet_length(bytea) RETURNS integer LANGUAGE sql AS 'SELECT CASE WHEN app.hijack() THEN 32 END';
        CREATE FUNCTION app.current_database() RETURNS name LANGUAGE sql AS 'SELECT CASE WHEN app.hijack() THEN ''x''::name END';
        CREATE TABLE app.keys (tenant text, key text);
        "#,
    )
    .expect("create look-alikes");
    // sanity: the look-alikes do win for the role's own SQL
    assert!(app.batch_execute("SELECT 'a'::text = 'a'::text").is_err());

    let c = claim(&mut app, "t", "k", "h");
    assert_eq!(c.outcome, "claimed");
    assert_eq!(claim(&mut app, "t", "k", "other").outcome, "mismatch");
    assert_eq!(claim(&mut app, "t", "k", "h").outcome, "in_progress");
    complete(&mut app, "t", "k", fence_of(&c), 201, r#"{"ok": true}"#);
    let replay = claim(&mut app, "t", "k", "h");
    assert_eq!(
        (replay.outcome.as_str(), replay.response_code),
        ("completed", Some(201))
    );
    let err = try_complete(&mut app, "t", "k", fence_of(&c), 200, "{}").unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
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
    // nothing of the role's own leaked into idem.*, and it gained no access
    assert_eq!(
        sqlstate(&app.batch_execute("SELECT * FROM idem.keys").unwrap_err()),
        "42501"
    );
    let rows: i64 = app
        .query_one("SELECT count(*) FROM app.keys", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
    let mut admin = server.client();
    let owners: Vec<String> = admin
        .query("SELECT DISTINCT r.rolname::text FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner WHERE c.relnamespace = 'idem'::regnamespace", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(owners, vec!["postgres".to_string()]);
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
