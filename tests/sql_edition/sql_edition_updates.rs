//! Updating the SQL edition from one release to the next (scripts/sql_edition.py --from): the
//! plain update run by pg_idem's owner, and through pg_tle `pgtle.install_update_path` and
//! `ALTER EXTENSION pg_idem UPDATE` on a managed-style server, with no superuser.
//!
//! 0.5.0 is the SQL edition's first release, so there is no real older one to update from yet.
//! The test makes a release pair from this source tree, as the next release will look:
//! - OLD: this tree (its version, 0.5.0 now), plus an internal function (schema idem) that the
//!   next release drops;
//! - NEW: this tree with the patch version raised (0.5.1), a new C function (declared in
//!   sql/extras.sql and in the native update script sql/pg_idem--OLD--NEW.sql, its SQL body
//!   in sql/edition/functions/), a changed internal body (an error's detail) and a changed
//!   comment.
//!
//! A database on OLD with keys, a tenant grant and a DBA's grant is updated, and must then be
//! what a fresh NEW install is (every function's definition, comment and privileges, every
//! column of idem's tables), keep its keys and answers, run the new and the changed bodies, and
//! have lost the dropped internal.

use std::path::{Path, PathBuf};
use std::process::Command;

use pg_idem_tests::managed::{self, ManagedServer};
use pg_idem_tests::{current_version, simple_one, sqlstate, Client, Column, Server};

/// The made-up NEW release: OLD with its patch version raised.
fn new_version() -> String {
    let old = current_version();
    let (head, patch) = old.rsplit_once('.').expect("a version a.b.c");
    format!(
        "{head}.{}",
        patch.parse::<u32>().expect("a numeric patch version") + 1
    )
}

/// The two made-up releases' SQL editions: (plain install of OLD, its pg_tle package, plain
/// update OLD -> NEW, pg_tle update, plain install of NEW).
struct Releases {
    old_plain: String,
    old_tle: String,
    update_plain: String,
    update_tle: String,
    new_plain: String,
}

fn copy_tree(to: &Path) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::create_dir_all(to.join("src")).unwrap();
    std::fs::create_dir_all(to.join("scripts")).unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(root.join("sql"))
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::copy(root.join("src/lib.rs"), to.join("src/lib.rs")).unwrap();
    // the facts sql_edition.py writes into the SQL edition (SHARED_FACTS)
    for fact_file in ["src/sql_api/args.rs", "rules/src/claims.rs"] {
        std::fs::create_dir_all(to.join(fact_file).parent().unwrap()).unwrap();
        std::fs::copy(root.join(fact_file), to.join(fact_file)).unwrap();
    }
    std::fs::copy(root.join("Cargo.toml"), to.join("Cargo.toml")).unwrap();
    std::fs::copy(
        root.join("scripts/sql_edition.py"),
        to.join("scripts/sql_edition.py"),
    )
    .unwrap();
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.contains(from),
        "{} does not contain {from:?}",
        path.display()
    );
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

fn append(path: &Path, text: &str) {
    let mut all = std::fs::read_to_string(path).unwrap_or_default();
    all.push_str(text);
    std::fs::write(path, all).unwrap();
}

fn generate(tree: &Path, args: &[&str]) -> PathBuf {
    let out = tree.join("out");
    let output = Command::new("python3")
        .arg(tree.join("scripts/sql_edition.py"))
        .arg("--out")
        .arg(&out)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "sql_edition.py {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

const NEW_FUNCTION: &str = "
CREATE FUNCTION idem_edition_probe() RETURNS text
LANGUAGE c STABLE PARALLEL SAFE
AS 'MODULE_PATHNAME', 'idem_edition_probe_wrapper';

COMMENT ON FUNCTION idem_edition_probe() IS 'A function new in the next release';

REVOKE ALL ON FUNCTION idem_edition_probe() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idem_edition_probe() TO pg_monitor;
";

fn releases() -> Releases {
    // one tree per test: the tests of this file run at once
    let test = std::thread::current().name().unwrap_or("test").to_string();
    let base =
        std::env::temp_dir().join(format!("pg_idem_sql_updates_{}_{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (old, new) = (base.join("old"), base.join("new"));
    let (old_v, new_v) = (current_version(), new_version());
    copy_tree(&old);
    copy_tree(&new);
    // OLD has an internal function NEW drops
    append(
        &old.join("sql/edition/rules/purge.sql"),
        "\nCREATE FUNCTION idem.obsolete_helper(n integer) RETURNS integer\nLANGUAGE sql\nAS $$ SELECT n $$;\n",
    );
    // NEW: another version, a new C function, a changed internal body and a changed comment
    edit(
        &new.join("Cargo.toml"),
        &format!("version = \"{old_v}\""),
        &format!("version = \"{new_v}\""),
    );
    append(&new.join("sql/extras.sql"), NEW_FUNCTION);
    std::fs::write(
        new.join(format!("sql/pg_idem--{old_v}--{new_v}.sql")),
        format!(
            "-- pg_idem {old_v} -> {new_v} (made up by tests/sql_edition/sql_edition_updates.rs)\n{NEW_FUNCTION}"
        ),
    )
    .unwrap();
    std::fs::write(
        new.join("sql/edition/functions/idem_edition_probe_wrapper.sql"),
        "-- language: sql\nSELECT 'probe'::text\n",
    )
    .unwrap();
    edit(
        &new.join("sql/edition/rules/errors.sql"),
        "'pg_idem cannot act on a NULL %s.'",
        "'pg_idem (next release) cannot act on a NULL %s.'",
    );
    edit(
        &new.join("sql/api.sql"),
        "'A new UUIDv7: time-ordered",
        "'A new UUIDv7 (next release): time-ordered",
    );
    let old_out = generate(&old, &[]);
    // --updates: every earlier release on the native update path, OLD here
    let new_out = generate(&new, &["--updates"]);
    let read = |dir: &Path, name: String| {
        std::fs::read_to_string(dir.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let releases = Releases {
        old_plain: read(&old_out, format!("pg_idem--{old_v}.sql")),
        old_tle: read(&old_out, format!("pg_idem--{old_v}.tle.sql")),
        update_plain: read(&new_out, format!("pg_idem--{old_v}--{new_v}.sql")),
        update_tle: read(&new_out, format!("pg_idem--{old_v}--{new_v}.tle.sql")),
        new_plain: read(&new_out, format!("pg_idem--{new_v}.sql")),
    };
    let _ = std::fs::remove_dir_all(&base);
    releases
}

/// A connection to `dbname` as the role that owns pg_idem there ([`managed::ADMIN`]).
fn admin_client(server: &Server, dbname: &str) -> Client {
    Client::connect(
        &format!(
            "host=127.0.0.1 port={} user={} dbname={dbname}",
            server.port,
            managed::ADMIN
        ),
        pg_idem_tests::NoTls,
    )
    .unwrap_or_else(|e| panic!("connect as {} to {dbname}: {e}", managed::ADMIN))
}

/// Everything an update must make equal to a fresh install, one line per object.
fn catalog(db: &mut Client) -> Vec<String> {
    let mut lines: Vec<String> = db.column(
        "SELECT pg_catalog.format('%s | %s | %s | %s', p.oid::pg_catalog.regprocedure,
                    pg_catalog.pg_get_functiondef(p.oid),
                    pg_catalog.obj_description(p.oid, 'pg_proc'), p.proacl)
               FROM pg_catalog.pg_proc AS p
              WHERE p.pronamespace = 'idem'::pg_catalog.regnamespace
                 OR (p.pronamespace = 'public'::pg_catalog.regnamespace AND p.proname LIKE 'idem%')
              ORDER BY 1",
        &[],
    );
    lines.extend(
        db.query(
            "SELECT pg_catalog.format('%s.%s %s %s %s', c.table_name, c.column_name, c.data_type,
                    c.is_nullable, c.column_default)
               FROM information_schema.columns AS c WHERE c.table_schema = 'idem' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0)),
    );
    lines
}

/// Keys, a tenant grant and a DBA's privilege change, made on OLD by the owner `db`.
fn populate(db: &mut Client) {
    db.batch_execute(
        "SELECT idem_claim('t', 'done', 'h');
         SELECT idem_complete('t', 'done', (SELECT fence FROM idem.keys WHERE key = 'done'), 201, '{\"id\": 7}');
         SELECT idem_claim('t', 'open', 'h', lease => '1 hour');
         SELECT idem_consume('t', 'message-1');
         SELECT idem_grant_tenant('app_user', 't');
         REVOKE EXECUTE ON FUNCTION idem_new_key() FROM PUBLIC;",
    )
    .expect("populate OLD");
}

/// What must hold on NEW after the update, in the database `db` (the owner's session).
fn check_updated(db: &mut Client) {
    let one = |db: &mut Client, sql: &str| simple_one(db, sql).unwrap().unwrap_or_default();
    assert_eq!(one(db, "SELECT idem_edition_probe()"), "probe");
    let err = db
        .query_one("SELECT outcome FROM idem_claim(NULL, 'k', 'h')", &[])
        .expect_err("a NULL tenant");
    let detail = err
        .as_db_error()
        .and_then(|e| e.detail())
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        detail, "pg_idem (next release) cannot act on a NULL tenant.",
        "{err:?}"
    );
    assert_eq!(
        one(
            db,
            "SELECT pg_catalog.to_regprocedure('idem.obsolete_helper(integer)') IS NULL"
        ),
        "t",
        "the internal the next release no longer has is dropped"
    );
    // the keys answer as before
    assert_eq!(
        one(db, "SELECT format('%s %s %s', outcome, response_code, response_body) FROM idem_claim('t', 'done', 'h')"),
        "completed 201 {\"id\": 7}"
    );
    assert_eq!(
        one(db, "SELECT outcome FROM idem_claim('t', 'open', 'h')"),
        "in_progress"
    );
    assert_eq!(one(db, "SELECT idem_consume('t', 'message-1')"), "f");
    assert_eq!(
        one(
            db,
            "SELECT string_agg(format('%s:%s', role, tenant), ',') FROM idem_tenant_grants()"
        ),
        "app_user:t"
    );
    // the DBA's revoke survived (CREATE OR REPLACE keeps privileges)
    assert_eq!(
        one(
            db,
            "SELECT has_function_privilege('app_user', 'idem_new_key()', 'EXECUTE')"
        ),
        "f"
    );
}

#[test]
fn the_plain_update_makes_a_database_what_a_fresh_install_is() {
    let releases = releases();
    let server = Server::start_bare(&[]);
    let mut postgres = server.client();
    postgres
        .batch_execute(&format!(
            "CREATE ROLE {} LOGIN CREATEROLE; CREATE ROLE {} LOGIN;",
            managed::ADMIN,
            managed::USER
        ))
        .unwrap();
    for dbname in ["updated", "fresh", "autocommit"] {
        // statements of their own: CREATE DATABASE runs outside a transaction block
        postgres
            .batch_execute(&format!(
                "CREATE DATABASE {dbname} OWNER {}",
                managed::ADMIN
            ))
            .unwrap();
    }
    let mut updated = admin_client(&server, "updated");
    updated
        .batch_execute(&format!("BEGIN;\n{}\nCOMMIT;", releases.old_plain))
        .expect("plain install of OLD");
    populate(&mut updated);
    updated
        .batch_execute(&format!("BEGIN;\n{}\nCOMMIT;", releases.update_plain))
        .expect("plain update to NEW");
    let mut updated = admin_client(&server, "updated");
    check_updated(&mut updated);

    let mut fresh = admin_client(&server, "fresh");
    fresh
        .batch_execute(&format!(
            "BEGIN;\n{}\nCOMMIT; REVOKE EXECUTE ON FUNCTION idem_new_key() FROM PUBLIC;",
            releases.new_plain
        ))
        .expect("plain install of NEW");
    assert_eq!(catalog(&mut updated), catalog(&mut fresh));
    let answers = simple_one(&mut updated, "SELECT idem_version()").unwrap();
    assert_eq!(answers.as_deref(), Some(new_version().as_str()));
    // an update runs once: run again, its first statement refuses (the database is at NEW
    // already, and says so), and nothing changes
    let err = updated
        .batch_execute(&format!("BEGIN;\n{}\nCOMMIT;", releases.update_plain))
        .expect_err("the plain update twice");
    assert_eq!(sqlstate(&err), "55000", "{err:?}");
    let message = err
        .as_db_error()
        .map(|e| e.message().to_owned())
        .unwrap_or_default();
    assert!(
        message.ends_with(&format!("and this database has {}", new_version())),
        "{message}"
    );
    updated.batch_execute("ROLLBACK").unwrap();
    assert_eq!(catalog(&mut updated), catalog(&mut fresh));
    plain_update_out_of_a_transaction_drops_nothing(&server, &releases);
}

/// The plain update run statement by statement (psql without -1, a migration tool that does
/// not wrap the file) must not take every function for a left-over: it stops before dropping
/// any, with an error that says how to run it, and the functions all work.
fn plain_update_out_of_a_transaction_drops_nothing(server: &Server, releases: &Releases) {
    let mut db = admin_client(server, "autocommit");
    db.batch_execute(&format!("BEGIN;\n{}\nCOMMIT;", releases.old_plain))
        .expect("plain install of OLD");
    populate(&mut db);
    let file = server.dir().join("update.sql");
    std::fs::write(&file, &releases.update_plain).unwrap();
    let port = server.port.to_string();
    let out = server.run_bin(
        "psql",
        &[
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            managed::ADMIN,
            "-d",
            "autocommit",
            "-v",
            "ON_ERROR_STOP=1",
            "-f",
            &file.to_string_lossy(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the update out of a transaction stops: {stderr}"
    );
    assert!(
        stderr.contains("the update must run in one transaction"),
        "{stderr}"
    );
    let mut db = admin_client(server, "autocommit");
    assert_eq!(
        simple_one(&mut db, "SELECT outcome FROM idem_claim('t', 'done', 'h')")
            .unwrap()
            .as_deref(),
        Some("completed")
    );
    assert_eq!(
        simple_one(&mut db, "SELECT count(*) FROM pg_catalog.pg_proc WHERE pronamespace = 'idem'::regnamespace AND proname = 'claim'")
            .unwrap()
            .as_deref(),
        Some("1")
    );
}

#[test]
fn alter_extension_update_through_pg_tle_makes_what_a_fresh_create_extension_makes() {
    let releases = releases();
    let Some(server) = ManagedServer::start(pg_idem_tests::major()) else {
        return;
    };
    let mut admin = server.client_as(managed::ADMIN);
    admin
        .batch_execute(&releases.old_tle)
        .expect("register OLD with pg_tle");
    admin
        .batch_execute("CREATE EXTENSION pg_idem")
        .expect("CREATE EXTENSION pg_idem (OLD)");
    populate(&mut admin);
    admin
        .batch_execute(&releases.update_tle)
        .expect("register the update with pg_tle");
    admin
        .batch_execute("ALTER EXTENSION pg_idem UPDATE")
        .expect("ALTER EXTENSION pg_idem UPDATE");
    let mut admin = server.client_as(managed::ADMIN);
    assert_eq!(
        simple_one(
            &mut admin,
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_idem'"
        )
        .unwrap()
        .as_deref(),
        Some(new_version().as_str())
    );
    check_updated(&mut admin);
    // every function is a member of the extension (a DROP EXTENSION leaves none behind)
    assert_eq!(
        simple_one(
            &mut admin,
            "SELECT count(*) FROM pg_catalog.pg_proc AS p
              WHERE (p.pronamespace = 'idem'::regnamespace OR p.proname LIKE 'idem%')
                AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                                 WHERE d.objid = p.oid AND d.deptype = 'e')"
        )
        .unwrap()
        .as_deref(),
        Some("0")
    );
    let updated = catalog(&mut admin);
    // a fresh CREATE EXTENSION now creates NEW directly (install_extension_version_sql and
    // the default version); its catalog is what the update made
    admin
        .batch_execute(
            "DROP EXTENSION pg_idem; CREATE EXTENSION pg_idem;
             REVOKE EXECUTE ON FUNCTION idem_new_key() FROM PUBLIC;",
        )
        .expect("CREATE EXTENSION pg_idem (NEW)");
    assert_eq!(
        simple_one(
            &mut admin,
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_idem'"
        )
        .unwrap()
        .as_deref(),
        Some(new_version().as_str())
    );
    assert_eq!(updated, catalog(&mut admin));
}
