//! What a DBA may do to idem.keys, and what pg_idem does then (docs/maintenance.md: "Changing
//! idem.keys"). The engine writes only the table CREATE EXTENSION made; a table with more
//! (columns, defaults, rules, a replica identity, a publication that filters) is written through
//! the executor, which enforces all of it; a change to one of pg_idem's own columns refuses
//! every call with 55000, and never crashes the server.
//!
//! Which path a call took is read from the DEBUG1 message pg_idem logs when it decides
//! ("idem.keys takes the SPI path (through the executor): ...").

use std::sync::{Arc, Mutex};

use pg_idem_tests::*;

/// A connection to `db` that collects the server's notices (client_min_messages = debug1).
fn watched(server: &Server, db: &str) -> (Client, Arc<Mutex<Vec<String>>>) {
    let notices = Arc::new(Mutex::new(Vec::new()));
    let seen = notices.clone();
    let mut config: postgres::Config = server.conninfo(db).parse().expect("conninfo");
    config.notice_callback(move |n| seen.lock().unwrap().push(n.message().to_string()));
    let mut client = config.connect(NoTls).expect("connect");
    client
        .batch_execute("SET client_min_messages = debug1")
        .expect("set");
    (client, notices)
}

/// Natively, why idem.keys took the SPI path (None: the engine's); the SQL edition has only
/// the executor's path and logs no decision: checked natively only (see
/// [`assert_executor_path`]).
fn executor_path(notices: &Arc<Mutex<Vec<String>>>) -> Option<String> {
    notices
        .lock()
        .unwrap()
        .iter()
        .find(|m| m.contains("idem.keys takes the SPI path (through the executor)"))
        .cloned()
}

/// Calls went through the executor: natively the DEBUG1 message of the decision (containing
/// `why`); in the SQL edition, which has no other path and logs no decision, nothing to check.
fn assert_executor_path(notices: &Arc<Mutex<Vec<String>>>, why: &str) {
    if edition() == Edition::Native {
        let logged = executor_path(notices).expect("the executor path ran");
        assert!(logged.contains(why), "{logged}");
    }
}

/// A database of its own with pg_idem, changed by `ddl`.
fn database(server: &Server, name: &str, ddl: &str) {
    server
        .client()
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create database");
    let mut db = server.client_db(name);
    install_pg_idem(&mut db);
    db.batch_execute(ddl).expect("the DBA's change");
}

fn first_crash(server: &Server) -> Option<String> {
    server
        .log()
        .lines()
        .find(|l| l.contains("terminated by signal") || l.contains("was terminated by"))
        .map(str::to_string)
}

#[test]
fn the_table_create_extension_made_is_written_by_the_engine() {
    if native_only("the engine's direct heap writes and its choice of path") {
        return;
    }
    let server = Server::start(&[]);
    database(&server, "exact", "SELECT 1");
    let (mut db, notices) = watched(&server, "exact");
    let c = claim(&mut db, "t", "k", "h");
    complete(&mut db, "t", "k", c.fence.unwrap(), 200, "{}");
    assert_eq!(executor_path(&notices), None);
    // a column added and dropped again leaves only a dropped attribute behind: still exact
    db.batch_execute(
        "ALTER TABLE idem.keys ADD COLUMN scratch int; ALTER TABLE idem.keys DROP COLUMN scratch",
    )
    .unwrap();
    let c = claim(&mut db, "t", "k2", "h");
    complete(&mut db, "t", "k2", c.fence.unwrap(), 201, "{}");
    assert_eq!(executor_path(&notices), None);
    assert_eq!(claim(&mut db, "t", "k2", "h").response_code, Some(201));
    amcheck(&mut db);
}

#[test]
fn added_columns_get_their_defaults_through_the_executor() {
    let server = Server::start(&[]);
    database(
        &server,
        "audit",
        "ALTER TABLE idem.keys ADD COLUMN added_at timestamptz DEFAULT clock_timestamp(); \
         ALTER TABLE idem.keys ADD COLUMN origin text NOT NULL DEFAULT 'app'",
    );
    let (mut db, notices) = watched(&server, "audit");
    let c = claim(&mut db, "t", "k", "h");
    complete(&mut db, "t", "k", c.fence.unwrap(), 200, "{\"ok\": true}");
    let consumed: bool = db
        .query_one("SELECT idem_consume('t', 'message-1')", &[])
        .expect("a consume on a table with a NOT NULL column of the DBA's")
        .get(0);
    assert!(consumed);
    assert_executor_path(&notices, "columns of its own (added_at, origin)");
    let rows = db
        .query(
            "SELECT key, added_at IS NOT NULL, origin FROM idem.keys ORDER BY key",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        let (key, stamped, origin): (String, bool, String) = (row.get(0), row.get(1), row.get(2));
        assert!(stamped, "{key}: added_at has its default");
        assert_eq!(origin, "app", "{key}");
    }
    assert_eq!(claim(&mut db, "t", "k", "h").outcome, "completed");
    amcheck(&mut db);
}

#[test]
fn rules_run_or_are_refused_as_the_executor_decides() {
    let server = Server::start(&[]);
    database(
        &server,
        "ruled",
        &format!(
            "CREATE TABLE public.audit (key text); GRANT INSERT ON public.audit TO {}; \
         CREATE RULE forget_audit AS ON DELETE TO idem.keys DO ALSO INSERT INTO public.audit VALUES (old.key)",
            pg_idem_owner()
        ),
    );
    let (mut db, notices) = watched(&server, "ruled");
    let c = claim(&mut db, "t", "k", "h");
    db.query_one("SELECT idem_release('t', 'k', $1)", &[&c.fence.unwrap()])
        .unwrap();
    assert_executor_path(&notices, "");
    let audited: i64 = db
        .query_one("SELECT count(*) FROM public.audit WHERE key = 'k'", &[])
        .unwrap()
        .get(0);
    assert_eq!(audited, 1, "the DELETE rule ran for idem_release");

    // an INSERT rule: PostgreSQL refuses INSERT ... ON CONFLICT on such a table, and says so
    db.batch_execute(
        "CREATE RULE claim_audit AS ON INSERT TO idem.keys DO ALSO INSERT INTO public.audit VALUES (new.key)",
    )
    .unwrap();
    let err = try_claim(&mut db, "t", "k3", "h", None, None).expect_err("refused");
    assert_eq!(sqlstate(&err), "0A000", "{err}");
    let stored: i64 = db
        .query_one("SELECT count(*) FROM idem.keys WHERE key = 'k3'", &[])
        .unwrap()
        .get(0);
    assert_eq!(stored, 0, "nothing was written around the rule");
}

#[test]
fn a_publication_without_identity_refuses_updates_as_the_executor_does() {
    let server = Server::start(&[]);
    database(
        &server,
        "published",
        "CREATE PUBLICATION keys_out FOR TABLE idem.keys; \
         ALTER TABLE idem.keys REPLICA IDENTITY NOTHING",
    );
    let (mut db, notices) = watched(&server, "published");
    let plain = db
        .batch_execute("UPDATE idem.keys SET attempt = attempt")
        .expect_err("refused");
    assert_eq!(sqlstate(&plain), "55000");
    let c = claim(&mut db, "t", "k", "h");
    let err = try_complete(&mut db, "t", "k", c.fence.unwrap(), 200, "{}").expect_err("refused");
    assert_eq!(sqlstate(&err), "55000", "{err}");
    assert!(
        format!("{err:?}").contains("replica identity"),
        "the executor's refusal: {err:?}"
    );
    assert_executor_path(&notices, "");
    // the default identity (the primary key) is what the engine writes with
    db.batch_execute("ALTER TABLE idem.keys REPLICA IDENTITY DEFAULT")
        .unwrap();
    let c = claim(&mut db, "t", "k2", "h");
    complete(&mut db, "t", "k2", c.fence.unwrap(), 200, "{}");

    let version: i32 = db
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .unwrap()
        .get(0);
    if version >= 150000 {
        // a row filter on a column outside the identity: the executor refuses UPDATE
        db.batch_execute(
            "CREATE PUBLICATION completed_only FOR TABLE idem.keys WHERE (state = 'c')",
        )
        .unwrap();
        notices.lock().unwrap().clear();
        let c = claim(&mut db, "t", "k3", "h");
        let err =
            try_complete(&mut db, "t", "k3", c.fence.unwrap(), 200, "{}").expect_err("refused");
        let text = format!("{err:?}");
        assert!(
            text.contains("replica identity") || text.contains("WHERE expression"),
            "the executor's refusal: {text}"
        );
        assert_executor_path(&notices, "");
    }
    amcheck(&mut db);
}

#[test]
fn a_narrower_tenant_column_refuses_every_call_and_stores_nothing() {
    if native_only("the engine's check of idem.keys' columns (store::definition)") {
        return;
    }
    let server = Server::start(&[]);
    database(
        &server,
        "narrow",
        "ALTER TABLE idem.keys ALTER COLUMN tenant TYPE varchar(16)",
    );
    let mut db = server.client_db("narrow");
    let tenant = "t".repeat(40);
    let err = try_claim(&mut db, &tenant, "k", "h", None, None).expect_err("refused");
    assert_eq!(sqlstate(&err), "55000", "{err}");
    let text = format!("{err:?}");
    assert!(
        text.contains("idem.keys is not the table pg_idem created"),
        "{text}"
    );
    assert!(
        text.contains("Column tenant has type character varying(16)"),
        "{text}"
    );
    let err = db
        .query_one("SELECT idem_consume('t', 'message')", &[])
        .expect_err("refused");
    assert_eq!(sqlstate(&err), "55000");
    let stored: i64 = db
        .query_one("SELECT count(*) FROM idem.keys", &[])
        .unwrap()
        .get(0);
    assert_eq!(stored, 0);
    // undone, pg_idem works again in the same session (the change's invalidation counts)
    db.batch_execute("ALTER TABLE idem.keys ALTER COLUMN tenant TYPE text")
        .unwrap();
    let c = claim(&mut db, "t", "k", "h");
    complete(&mut db, "t", "k", c.fence.unwrap(), 200, "{}");
}

/// Run alone on its server, and checked last: before pg_idem recognised its table, this change
/// crashed the backend (SIGSEGV) and with it every session of the server.
#[test]
fn a_changed_column_type_is_refused_without_crashing_the_server() {
    if native_only(
        "the engine's check of idem.keys' columns (store::definition), which keeps its direct \
         heap writes from misreading a changed row",
    ) {
        return;
    }
    let server = Server::start(&[]);
    database(&server, "typed", "SELECT 1");
    let mut db = server.client_db("typed");
    let mut other = server.client_db("typed");
    claim(&mut other, "t", "decided-before", "h");
    let c = claim(&mut db, "t", "k", "h");
    let fence = c.fence.unwrap();
    db.batch_execute("ALTER TABLE idem.keys ALTER COLUMN response_code TYPE numeric")
        .unwrap();
    let err = try_complete(&mut db, "t", "k", fence, 200, "{}").expect_err("refused");
    assert_eq!(sqlstate(&err), "55000", "{err}");
    assert!(
        format!("{err:?}").contains("Column response_code has type numeric"),
        "{err:?}"
    );
    // also for a backend that decided before the change, and for every other function
    for sql in [
        "SELECT outcome FROM idem_claim('t', 'k2', 'h')",
        "SELECT idem_forget('t', 'k')",
        "SELECT idem_consume('t', 'm')",
    ] {
        let err = other.batch_execute(sql).expect_err(sql);
        assert_eq!(sqlstate(&err), "55000", "{sql}: {err}");
    }
    let still: i64 = db
        .query_one("SELECT 1::int8", &[])
        .expect("the session survived")
        .get(0);
    assert_eq!(still, 1);
    assert_eq!(first_crash(&server), None, "a server process crashed");
}
