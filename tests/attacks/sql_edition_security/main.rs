//! The SQL edition attacked: as a hostile role (look-alike objects on every search path it
//! controls, hostile session settings, direct access to pg_idem's state, other tenants' keys,
//! table-owner code run by someone else's maintenance, advisory locks, every argument it may
//! pass) and as a DBA (columns, indexes, triggers, rules, row level security, VACUUM FULL,
//! REINDEX, CLUSTER on idem.keys), and in read-only, parallel and prepared transactions.
//!
//! Every server here runs the SQL edition's plain install as `Target::plain()` of the
//! sql_edition suite does it (the harness's `managed::plain_server`: no library preloaded;
//! `app_admin`, not a superuser, owns pg_idem); a few start a native server next to it to
//! compare with what the native edition answers. Where the SQL edition differs on purpose
//! (docs/editions.md), the test pins the difference as documented.

use std::time::{Duration, Instant};

use pg_idem_tests::managed::{app_roles, plain_server};
use pg_idem_tests::{amcheck, major, simple_rows, wait_for, Client, NoTls, Server};

mod advisory_locks;
mod dba_changes;
mod direct_access;
mod look_alikes;
mod odd_arguments;
mod owner_code;
mod tenants;
mod transactions;

// ---------------------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------------------

/// pg_idem's owner: the database's owner, CREATEROLE, not a superuser (RDS's master user).
const ADMIN: &str = pg_idem_tests::managed::ADMIN;
/// An application's login with no attribute.
const USER: &str = pg_idem_tests::managed::USER;

/// The SQL edition's plain install (the harness builds it from this tree, or from the tree
/// `PG_IDEM_SQL_EDITION_SOURCE` names: a copy with a fix being tried).
fn edition() -> &'static str {
    &pg_idem_tests::sql_edition().plain
}

/// A connection as `role` to database `db`, statements bounded to a minute.
fn connect(server: &Server, role: &str, db: &str) -> Client {
    connect_with(server, role, db, "60s")
}

fn connect_with(server: &Server, role: &str, db: &str, statement_timeout: &str) -> Client {
    connect_to_port(server.port, role, db, statement_timeout)
}

/// connect_with by the server's port, for a thread of its own.
fn connect_to_port(port: u16, role: &str, db: &str, statement_timeout: &str) -> Client {
    let conninfo = format!(
        "host=127.0.0.1 port={port} user={role} dbname={db} connect_timeout=10 \
         options='-c statement_timeout={statement_timeout}'"
    );
    Client::connect(&conninfo, NoTls).unwrap_or_else(|e| panic!("connect as {role} to {db}: {e}"))
}

/// The plain install, by app_admin, in one transaction, in database `db`.
fn install(server: &Server, db: &str) {
    connect(server, ADMIN, db)
        .batch_execute(&format!("BEGIN;\n{}\nCOMMIT;", edition()))
        .unwrap_or_else(|e| panic!("plain install of the SQL edition into {db}: {e:?}"));
}

/// A server with pg_idem's library preloaded and CREATE EXTENSION pg_idem (owned by the
/// superuser, as natively), with the same roles: what the native edition answers.
fn native(conf: &[&str]) -> Server {
    let server = Server::start_bare(
        &[
            &[
                "shared_preload_libraries = 'pg_idem'",
                "pg_idem.purge_interval = 0",
            ],
            conf,
        ]
        .concat(),
    );
    server
        .client()
        .batch_execute("CREATE EXTENSION pg_idem")
        .expect("CREATE EXTENSION pg_idem");
    app_roles(&server);
    server
}

/// An owner-only setting: in the SQL edition a row of idem.settings (a missing row is the
/// default).
fn owner_setting(server: &Server, db: &str, name: &str, value: &str) {
    connect(server, ADMIN, db)
        .batch_execute(&format!(
            "INSERT INTO idem.settings (name, value) VALUES ('{name}', '{value}') \
             ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value"
        ))
        .unwrap_or_else(|e| panic!("{name} = {value}: {e:?}"));
}

/// pg_idem.tenant_grants on.
fn tenant_grants_on(server: &Server) {
    owner_setting(server, "postgres", "pg_idem.tenant_grants", "on");
}

fn grant(server: &Server, role: &str, tenant: &str) {
    connect(server, ADMIN, "postgres")
        .batch_execute(&format!("SELECT idem_grant_tenant('{role}', '{tenant}')"))
        .expect("idem_grant_tenant");
}

/// No backend crashed, nothing PANICked, no assertion failed: what the server log says.
fn assert_no_crash(server: &Server) {
    let log = server.log();
    for sign in [
        "PANIC",
        "was terminated by signal",
        "terminating any other active server processes",
        "TRAP:",
        "server process (PID",
    ] {
        assert!(
            !log.contains(sign),
            "the server log shows a crash ({sign}):\n{log}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Statements and their answers
// ---------------------------------------------------------------------------------------------

type Rows = Vec<Vec<Option<String>>>;

/// What a statement gave: its rows as text, or its error.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Rows(Rows),
    Error { code: String, message: String },
}

impl Answer {
    fn code(&self) -> Option<&str> {
        match self {
            Answer::Rows(_) => None,
            Answer::Error { code, .. } => Some(code),
        }
    }

    /// The first column of the first row ("" for none).
    fn first(&self) -> String {
        match self {
            Answer::Rows(rows) => rows
                .first()
                .and_then(|r| r.first().cloned().flatten())
                .unwrap_or_default(),
            Answer::Error { code, message } => format!("ERROR {code}: {message}"),
        }
    }
}

/// Runs `sql` (simple protocol: several statements allowed).
fn ask(db: &mut Client, sql: &str) -> Answer {
    match simple_rows(db, sql) {
        Ok(rows) => Answer::Rows(rows),
        Err(e) => match e.as_db_error() {
            Some(db_error) => Answer::Error {
                code: db_error.code().code().to_string(),
                message: db_error.message().to_string(),
            },
            None => Answer::Error {
                code: "client".into(),
                message: e.to_string(),
            },
        },
    }
}

/// The first column of the first row; panics on an error.
fn one(db: &mut Client, sql: &str) -> String {
    match ask(db, sql) {
        Answer::Error { code, message } => panic!("{sql}: {code} {message}"),
        answer => answer.first(),
    }
}

/// The SQLSTATE `sql` fails with; panics when it succeeds.
fn fails(db: &mut Client, sql: &str) -> String {
    match ask(db, sql) {
        Answer::Rows(rows) => panic!("{sql} succeeded: {rows:?}"),
        Answer::Error { code, .. } => code,
    }
}

/// A claim whose fence is kept in the session variable `my.<name>`: its outcome.
fn claim_into(db: &mut Client, name: &str, call: &str) -> String {
    one(
        db,
        &format!(
            "SELECT c.outcome FROM {call} AS c \
             WHERE pg_catalog.set_config('my.{name}', COALESCE(c.fence::text, '0'), false) IS NOT NULL"
        ),
    )
}

/// The fence kept by `claim_into`, as SQL.
fn fence(name: &str) -> String {
    format!("pg_catalog.current_setting('my.{name}')::bigint")
}
