//! Updating the SQL edition from one release to the next (scripts/sql_edition.py --from): the
//! plain update run by pg_idem's owner, and through pg_tle `pgtle.install_update_path` and
//! `ALTER EXTENSION pg_idem UPDATE` on a managed-style server, with no superuser.
//!
//! Two kinds of update:
//! - from the released 0.5.0 (the SQL edition's first release, commit ef35c48, frozen in
//!   tests/sql_edition/released/) to this version: the update `--updates` generates from this
//!   tree, plainly with `psql -1` and through pg_tle;
//! - from this tree to a made-up next release, as the next release will look:
//!   - OLD: this tree (its version), plus an internal function (schema idem) that the next
//!     release drops;
//!   - NEW: this tree with the patch version raised, a new C function (declared in
//!     sql/extras.sql and in the native update script sql/pg_idem--OLD--NEW.sql, its SQL body
//!     in sql/edition/functions/), a changed internal body (an error's detail) and a changed
//!     comment.
//!
//! A database on the older version with keys, a tenant grant and a DBA's grant is updated, and
//! must then be what a fresh install of the newer one is (every function's definition, comment
//! and privileges; every table, index, constraint, trigger and column of schema idem and the
//! attributes of its types), keep its keys and answers, run the new and the changed bodies, and
//! have lost the dropped internals.

use std::path::{Path, PathBuf};
use std::process::Command;

use pg_idem_tests::managed::{self, ManagedServer};
use pg_idem_tests::{
    current_version, git_tree_at, released_sql_edition_0_5_0, simple_one, skip_test, sqlstate,
    Client, Column, Server, RELEASE_0_5_0,
};

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
    let mut lines = functions_and_columns(db);
    lines.extend(db.column::<String>(
        "SELECT line FROM (
             SELECT pg_catalog.format('relation %s %s %s %s', c.oid::pg_catalog.regclass, c.relkind,
                        c.relacl, pg_catalog.obj_description(c.oid, 'pg_class')) AS line
               FROM pg_catalog.pg_class AS c WHERE c.relnamespace = 'idem'::pg_catalog.regnamespace
             UNION ALL
             SELECT pg_catalog.format('attribute %s.%s %s', c.oid::pg_catalog.regclass, a.attname,
                        pg_catalog.format_type(a.atttypid, a.atttypmod))
               FROM pg_catalog.pg_class AS c
               JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
              WHERE c.relnamespace = 'idem'::pg_catalog.regnamespace AND c.relkind = 'c'
             UNION ALL
             SELECT pg_catalog.format('constraint %s %s %s', co.conrelid::pg_catalog.regclass, co.conname,
                        pg_catalog.pg_get_constraintdef(co.oid))
               FROM pg_catalog.pg_constraint AS co WHERE co.connamespace = 'idem'::pg_catalog.regnamespace
             UNION ALL
             SELECT pg_catalog.format('index %s', pg_catalog.pg_get_indexdef(i.indexrelid))
               FROM pg_catalog.pg_index AS i JOIN pg_catalog.pg_class AS c ON c.oid = i.indrelid
              WHERE c.relnamespace = 'idem'::pg_catalog.regnamespace
             UNION ALL
             SELECT pg_catalog.format('trigger %s enabled %s', pg_catalog.pg_get_triggerdef(tg.oid), tg.tgenabled)
               FROM pg_catalog.pg_trigger AS tg JOIN pg_catalog.pg_class AS c ON c.oid = tg.tgrelid
              WHERE c.relnamespace = 'idem'::pg_catalog.regnamespace AND NOT tg.tgisinternal
         ) AS described ORDER BY line",
        &[],
    ));
    lines
}

/// Every function's definition, comment and privileges, and every column of idem's tables.
fn functions_and_columns(db: &mut Client) -> Vec<String> {
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
    check_populated(db);
}

/// The keys, grant and revoke of [`populate`] answer as before, in the owner's session `db`.
fn check_populated(db: &mut Client) {
    let one = |db: &mut Client, sql: &str| simple_one(db, sql).unwrap().unwrap_or_default();
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

// ---------------------------------------------------------------------------------------------
// From the released 0.5.0 (commit ef35c48) to this version.

/// The frozen SQL edition of the released 0.5.0 (tests/sql_edition/released/) is what that
/// commit's scripts/sql_edition.py generates, byte for byte: the updates below start from what
/// a database installed from the release has.
#[test]
fn the_frozen_0_5_0_is_what_its_commit_generates() {
    let (version, commit) = RELEASE_0_5_0;
    let base = std::env::temp_dir().join(format!("pg_idem_frozen_{}", std::process::id()));
    let tree = match git_tree_at(commit, &base) {
        Ok(tree) => tree,
        Err(why) => {
            skip_test(
                "git_history",
                &format!("the released {version} ({commit}) is not in this clone: {why}"),
            );
            return;
        }
    };
    let out = generate(&tree, &[]);
    let (plain, tle) = released_sql_edition_0_5_0();
    let generated = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    assert!(
        generated(&format!("pg_idem--{version}.sql")) == plain,
        "tests/sql_edition/released/pg_idem--{version}.sql is not what {commit} generates"
    );
    assert!(
        generated(&format!("pg_idem--{version}.tle.sql")) == tle,
        "tests/sql_edition/released/pg_idem--{version}.tle.sql is not what {commit} generates"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// This tree's SQL edition: (plain update from the released 0.5.0, its pg_tle update, plain
/// install), as `scripts/sql_edition.py --updates` writes them.
fn updates_from_the_release() -> (String, String, String) {
    let test = std::thread::current().name().unwrap_or("test").to_string();
    let base =
        std::env::temp_dir().join(format!("pg_idem_sql_release_{}_{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    copy_tree(&base);
    let out = generate(&base, &["--updates"]);
    let (old, new) = (RELEASE_0_5_0.0, current_version());
    let read = |name: String| {
        std::fs::read_to_string(out.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let files = (
        read(format!("pg_idem--{old}--{new}.sql")),
        read(format!("pg_idem--{old}--{new}.tle.sql")),
        read(format!("pg_idem--{new}.sql")),
    );
    let _ = std::fs::remove_dir_all(&base);
    files
}

/// Runs `sql` with psql as pg_idem's owner ([`managed::ADMIN`]) in database `dbname`, the way
/// the docs tell an owner to run an install or update file: `psql -1 -v ON_ERROR_STOP=1 -f`.
fn psql_file(server: &Server, dbname: &str, sql: &str) -> std::process::Output {
    let file = server.dir().join(format!("{dbname}-{}.sql", sql.len()));
    std::fs::write(&file, sql).unwrap();
    let port = server.port.to_string();
    server.run_bin(
        "psql",
        &[
            "-X",
            "-q",
            "-1",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            managed::ADMIN,
            "-d",
            dbname,
            "-f",
            &file.to_string_lossy(),
        ],
    )
}

/// [`populate`], and settings the owner wrote into 0.5.0's idem.settings as 0.5.0 read them
/// (a number with spaces, a Boolean spelt `no`), which 0.6.0 stores checked and normalised.
fn populate_release(db: &mut Client) {
    populate(db);
    db.batch_execute(
        "INSERT INTO idem.settings VALUES ('pg_idem.max_key_length', ' 300'), \
                                          ('pg_idem.purge_in_passing', 'no')",
    )
    .expect("0.5.0's settings");
}

/// `updated` and `fresh` (catalogs of [`catalog`]) are the same; else the lines of each alone.
fn assert_same_catalog(updated: &[String], fresh: &[String], what: &str) {
    let only = |a: &[String], b: &[String]| -> Vec<String> {
        a.iter()
            .filter(|line| !b.contains(line))
            .map(|line| line.replace('\n', "\n        "))
            .collect()
    };
    let (only_updated, only_fresh) = (only(updated, fresh), only(fresh, updated));
    assert!(
        only_updated.is_empty() && only_fresh.is_empty() && updated.len() == fresh.len(),
        "{what} differs from a fresh install:\n  only after the update:\n    {}\n  only in a fresh install:\n    {}",
        only_updated.join("\n    "),
        only_fresh.join("\n    "),
    );
}

/// What the released 0.5.0 has not: idem_version(), idem.role_settings, the key lock secret.
fn has_what_came_after_0_5_0(db: &mut Client) -> [bool; 3] {
    let one = |db: &mut Client, sql: &str| simple_one(db, sql).unwrap().as_deref() == Some("t");
    [
        one(
            db,
            "SELECT pg_catalog.to_regprocedure('idem_version()') IS NOT NULL",
        ),
        one(
            db,
            "SELECT pg_catalog.to_regclass('idem.role_settings') IS NOT NULL",
        ),
        one(
            db,
            "SELECT pg_catalog.to_regclass('idem.key_lock_secret') IS NOT NULL",
        ),
    ]
}

/// What must hold after the update from the released 0.5.0, in the owner's session `db`.
fn check_updated_from_release(db: &mut Client) {
    let one = |db: &mut Client, sql: &str| simple_one(db, sql).unwrap().unwrap_or_default();
    assert_eq!(has_what_came_after_0_5_0(db), [true; 3]);
    assert_eq!(one(db, "SELECT idem_version()"), current_version());
    check_populated(db);
    // 0.5.0's rows, as 0.6.0 stores them, and in force: a key of 300 bytes is taken
    assert_eq!(
        one(
            db,
            "SELECT string_agg(name || '=' || value, ',' ORDER BY name) FROM idem.settings"
        ),
        "pg_idem.max_key_length=300,pg_idem.purge_in_passing=off"
    );
    assert_eq!(
        one(
            db,
            "SELECT outcome FROM idem_claim('t', repeat('k', 300), 'h')"
        ),
        "claimed"
    );
    // the tables 0.6.0 added work: a role's setting, checked and stored in the base unit
    db.batch_execute(&format!(
        "INSERT INTO idem.role_settings VALUES ('{}', 'pg_idem.lease_timeout', '30s')",
        managed::USER
    ))
    .expect("a role's setting");
    assert_eq!(one(db, "SELECT value FROM idem.role_settings"), "30000");
    db.batch_execute("DELETE FROM idem.role_settings").unwrap();
    assert_eq!(
        one(
            db,
            "SELECT count(*) FROM idem.key_lock_secret WHERE octet_length(secret) >= 16"
        ),
        "1"
    );
    // a key locked and claimed afresh with the secret: new keys, completions and consumes
    let fence = one(db, "SELECT fence FROM idem_claim('t', 'after', 'h')");
    db.batch_execute(&format!(
        "SELECT idem_complete('t', 'after', {fence}, 200, '{{}}')"
    ))
    .expect("complete a key claimed after the update");
    assert_eq!(one(db, "SELECT idem_consume('t', 'message-2')"), "t");
}

#[test]
fn the_plain_update_from_the_released_0_5_0_makes_a_fresh_install() {
    let (old, _) = RELEASE_0_5_0;
    let (released_plain, _) = released_sql_edition_0_5_0();
    let (update_plain, _, new_plain) = updates_from_the_release();
    let server = Server::start_bare(&[]);
    let mut postgres = server.client();
    postgres
        .batch_execute(&format!(
            "CREATE ROLE {} LOGIN CREATEROLE; CREATE ROLE {} LOGIN;",
            managed::ADMIN,
            managed::USER
        ))
        .unwrap();
    for dbname in ["updated", "fresh", "refused"] {
        postgres
            .batch_execute(&format!(
                "CREATE DATABASE {dbname} OWNER {}",
                managed::ADMIN
            ))
            .unwrap();
    }
    let out = psql_file(&server, "updated", &released_plain);
    assert!(out.status.success(), "plain install of {old}: {out:?}");
    let mut updated = admin_client(&server, "updated");
    populate_release(&mut updated);
    assert_eq!(has_what_came_after_0_5_0(&mut updated), [false; 3]);

    let out = psql_file(&server, "updated", &update_plain);
    assert!(out.status.success(), "plain update from {old}: {out:?}");
    let mut updated = admin_client(&server, "updated");
    check_updated_from_release(&mut updated);

    let out = psql_file(&server, "fresh", &new_plain);
    assert!(
        out.status.success(),
        "plain install of {}: {out:?}",
        current_version()
    );
    let mut fresh = admin_client(&server, "fresh");
    fresh
        .batch_execute("REVOKE EXECUTE ON FUNCTION idem_new_key() FROM PUBLIC")
        .unwrap();
    assert_same_catalog(
        &catalog(&mut updated),
        &catalog(&mut fresh),
        &format!("{old} updated plainly"),
    );

    // run again, the update refuses: the database has this version now
    let out = psql_file(&server, "updated", &update_plain);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the update twice: {stderr}");
    assert!(
        stderr.contains(&format!(
            "this file updates {old} to {}, and this database has {}",
            current_version(),
            current_version()
        )),
        "{stderr}"
    );
    // a build of 0.5.0 made after its release (it has idem_version()) is no 0.5.0 the update
    // knows: refused, nothing changed
    fresh
        .batch_execute(&format!(
            "CREATE OR REPLACE FUNCTION idem_version() RETURNS text LANGUAGE sql AS $$ SELECT '{old}'::text $$"
        ))
        .unwrap();
    let before = catalog(&mut fresh);
    let out = psql_file(&server, "fresh", &update_plain);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "this database has a build of {old} made after its release"
        )),
        "{stderr}"
    );
    assert_eq!(catalog(&mut admin_client(&server, "fresh")), before);

    // a setting 0.5.0 took and 0.6.0 refuses stops the update with the native error naming
    // it, before anything changed; corrected, the update runs
    let out = psql_file(&server, "refused", &released_plain);
    assert!(out.status.success(), "plain install of {old}: {out:?}");
    let mut refused = admin_client(&server, "refused");
    refused
        .batch_execute("INSERT INTO idem.settings VALUES ('pg_idem.max_key_length', '5000')")
        .unwrap();
    let out = psql_file(&server, "refused", &update_plain);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            r#"5000 is outside the valid range for parameter "pg_idem.max_key_length" (1 .. 1024)"#
        ),
        "{stderr}"
    );
    assert_eq!(has_what_came_after_0_5_0(&mut refused), [false; 3]);
    refused
        .batch_execute("UPDATE idem.settings SET value = '1024'")
        .unwrap();
    let out = psql_file(&server, "refused", &update_plain);
    assert!(
        out.status.success(),
        "the update, the row corrected: {out:?}"
    );
    assert_eq!(has_what_came_after_0_5_0(&mut refused), [true; 3]);
}

#[test]
fn alter_extension_update_from_the_released_0_5_0_through_pg_tle_makes_a_fresh_create_extension() {
    let (old, _) = RELEASE_0_5_0;
    let (_, released_tle) = released_sql_edition_0_5_0();
    let (_, update_tle, _) = updates_from_the_release();
    let Some(server) = ManagedServer::start(pg_idem_tests::major()) else {
        return;
    };
    let mut admin = server.client_as(managed::ADMIN);
    let extversion = |db: &mut Client| {
        simple_one(
            db,
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_idem'",
        )
        .unwrap()
        .unwrap_or_default()
    };
    admin
        .batch_execute(&released_tle)
        .unwrap_or_else(|e| panic!("register {old} with pg_tle: {e:?}"));
    admin
        .batch_execute("CREATE EXTENSION pg_idem")
        .unwrap_or_else(|e| panic!("CREATE EXTENSION pg_idem ({old}): {e:?}"));
    assert_eq!(extversion(&mut admin), old);
    populate_release(&mut admin);
    assert_eq!(has_what_came_after_0_5_0(&mut admin), [false; 3]);
    admin
        .batch_execute(&update_tle)
        .unwrap_or_else(|e| panic!("register the update from {old} with pg_tle: {e:?}"));
    admin
        .batch_execute("ALTER EXTENSION pg_idem UPDATE")
        .unwrap_or_else(|e| panic!("ALTER EXTENSION pg_idem UPDATE from {old}: {e:?}"));
    let mut admin = server.client_as(managed::ADMIN);
    assert_eq!(extversion(&mut admin), current_version());
    check_updated_from_release(&mut admin);
    // every function and table is a member of the extension (a DROP EXTENSION leaves none)
    assert_eq!(
        simple_one(
            &mut admin,
            "SELECT count(*) FROM (
                 SELECT p.oid, 'pg_proc'::regclass AS classid FROM pg_catalog.pg_proc AS p
                  WHERE p.pronamespace = 'idem'::regnamespace OR p.proname LIKE 'idem%'
                 UNION ALL
                 SELECT c.oid, 'pg_class'::regclass FROM pg_catalog.pg_class AS c
                  WHERE c.relnamespace = 'idem'::regnamespace AND c.relkind IN ('r', 'S')
             ) AS o
              WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                                 WHERE d.classid = o.classid AND d.objid = o.oid AND d.deptype = 'e')"
        )
        .unwrap()
        .as_deref(),
        Some("0")
    );
    let updated = catalog(&mut admin);
    admin
        .batch_execute(
            "DROP EXTENSION pg_idem; CREATE EXTENSION pg_idem;
             REVOKE EXECUTE ON FUNCTION idem_new_key() FROM PUBLIC;",
        )
        .expect("CREATE EXTENSION pg_idem (this version)");
    assert_eq!(extversion(&mut admin), current_version());
    assert_same_catalog(
        &updated,
        &catalog(&mut admin),
        &format!("{old} updated through pg_tle"),
    );
}
