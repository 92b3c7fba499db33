//! The managed-style test servers of the SQL edition (tests/harness/managed.rs) are what they
//! claim to be, on PostgreSQL 15 (Debian's, copied) and 18 (a relocatable tree): the server
//! runs from a tree with pg_tle and without any pg_idem file; `app_admin`, not a superuser, can
//! register a Trusted Language Extension, create it, update it along a registered path and let
//! `app_user` call it; and `pgtle.install_extension('pg_idem', ...)` is accepted there, while a
//! name whose control file the tree has is refused. Skipped (reported by `skip_test`) when
//! ../shared/pg_tle is missing.

use std::path::PathBuf;
use std::process::Command;

use pg_idem_tests::managed::{ManagedServer, ADMIN, USER};
use pg_idem_tests::{simple_one, sqlstate, Client};

/// Debian 12's PostgreSQL, copied by scripts/lib/managed_pg.sh.
const PG15: u32 = 15;
/// The cached relocatable build, copied by scripts/lib/managed_pg.sh.
const PG18: u32 = 18;

/// One text value of a query without parameters.
fn text(db: &mut Client, sql: &str) -> String {
    simple_one(db, sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or_else(|| panic!("{sql}: no value"))
}

fn pg_config(server: &ManagedServer, what: &str) -> PathBuf {
    let out = Command::new(server.bindir().join("pg_config"))
        .arg(what)
        .output()
        .expect("run the managed tree's pg_config");
    assert!(out.status.success(), "pg_config {what} failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The tree has pg_tle and no pg_idem, the running server uses that tree's share/ and lib/
/// (not the system's), and pg_tle refuses a TLE named like an extension with a control file.
fn tree_is_managed_style(major: u32) {
    let Some(server) = ManagedServer::start(major) else {
        return;
    };
    let dir = server.dir().to_path_buf();
    let tree = server
        .bindir()
        .ancestors()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n == format!("managed-{major}").as_str())
        })
        .unwrap_or_else(|| {
            panic!(
                "{} is not in a managed-{major} tree",
                server.bindir().display()
            )
        })
        .to_path_buf();

    let sharedir = pg_config(&server, "--sharedir");
    let pkglibdir = pg_config(&server, "--pkglibdir");
    assert!(
        sharedir.starts_with(&tree),
        "sharedir {}",
        sharedir.display()
    );
    assert!(
        pkglibdir.starts_with(&tree),
        "pkglibdir {}",
        pkglibdir.display()
    );
    assert!(
        !sharedir.join("extension/pg_idem.control").exists(),
        "the managed tree has pg_idem.control"
    );
    assert!(
        !pkglibdir.join("pg_idem.so").exists(),
        "the managed tree has pg_idem.so"
    );
    assert!(sharedir.join("extension/pg_tle.control").exists());
    assert!(pkglibdir.join("pg_tle.so").exists());

    // the server itself reads that share/ and lib/ (a Debian binary copied elsewhere would
    // fall back to /usr/share/postgresql/15 if it did not relocate); pg_config the view is
    // superuser-only, and this looks at the server from outside
    let mut su = server.superuser_client();
    let dirs = text(
        &mut su,
        "SELECT string_agg(setting, ' ' ORDER BY name) FROM pg_config WHERE name IN ('PKGLIBDIR', 'SHAREDIR')",
    );
    assert_eq!(
        dirs,
        format!("{} {}", pkglibdir.display(), sharedir.display())
    );
    assert_eq!(text(&mut su, "SHOW shared_preload_libraries"), "pg_tle");
    assert_eq!(
        text(&mut su, "SELECT current_setting('server_version_num')")[..2],
        major.to_string()
    );
    drop(su);

    let mut admin = server.client_as(ADMIN);
    assert_eq!(
        text(
            &mut admin,
            "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_idem'"
        ),
        "0",
        "the server sees a native pg_idem"
    );
    // the refusal pg_idem would meet on a server with its native files, shown with a native
    // extension this tree does have (plpgsql): same check, same error
    let err = admin
        .batch_execute(
            "SELECT pgtle.install_extension('plpgsql', '1.0', 'probe', \
             $_pg$ CREATE FUNCTION plpgsql_probe() RETURNS int LANGUAGE sql AS 'SELECT 1' $_pg$)",
        )
        .expect_err("pg_tle registered a TLE named like a native extension");
    assert_eq!(sqlstate(&err), "55000", "{err}");
    let db_error = err.as_db_error().expect("a server error");
    assert_eq!(
        db_error.message(),
        "control file already exists for the plpgsql extension"
    );
    drop(admin);

    drop(server);
    assert!(!dir.exists(), "{} is left after drop", dir.display());
}

/// What the SQL edition's install path needs: app_admin (no superuser) registers, creates and
/// updates a TLE; app_user uses it once granted; pg_idem is a name pg_tle accepts here.
fn tle_lifecycle(major: u32) {
    let Some(server) = ManagedServer::start(major) else {
        return;
    };
    let mut admin = server.client_as(ADMIN);
    let mut user = server.client_as(USER);

    // app_admin is like rds_superuser: no superuser, CREATEROLE, pgtle_admin, owns app
    assert_eq!(
        text(
            &mut admin,
            "SELECT format('%s %s %s %s', r.rolsuper, r.rolcreaterole, r.rolcreatedb, \
                    pg_has_role(current_user, 'pgtle_admin', 'MEMBER')) \
               FROM pg_roles r WHERE r.rolname = current_user"
        ),
        "f t f t"
    );
    assert_eq!(
        text(
            &mut admin,
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
        ),
        ADMIN
    );
    assert_eq!(
        text(
            &mut user,
            "SELECT format('%s %s', rolsuper, pg_has_role(current_user, 'pgtle_admin', 'MEMBER')) \
               FROM pg_roles WHERE rolname = current_user"
        ),
        "f f"
    );
    // only pgtle_admin registers TLEs
    let err = user
        .batch_execute(
            "SELECT pgtle.install_extension('tle_user', '1.0', 'probe', \
             $_pg$ CREATE FUNCTION tle_user() RETURNS int LANGUAGE sql AS 'SELECT 1' $_pg$)",
        )
        .expect_err("app_user registered a TLE");
    assert_eq!(sqlstate(&err), "42501", "{err}");

    // register, create
    assert_eq!(
        text(
            &mut admin,
            "SELECT pgtle.install_extension('tle_probe', '1.0', 'probe', \
             $_pg$ CREATE FUNCTION tle_probe() RETURNS int LANGUAGE sql AS 'SELECT 1' $_pg$)"
        ),
        "t"
    );
    admin
        .batch_execute("CREATE EXTENSION tle_probe")
        .expect("CREATE EXTENSION tle_probe as app_admin");
    assert_eq!(
        text(
            &mut admin,
            "SELECT format('%s %s %s', e.extversion, pg_get_userbyid(e.extowner), pg_get_userbyid(p.proowner)) \
               FROM pg_extension e, pg_proc p \
              WHERE e.extname = 'tle_probe' AND p.oid = 'public.tle_probe()'::regprocedure"
        ),
        format!("1.0 {ADMIN} {ADMIN}")
    );

    // app_user calls it once granted
    admin
        .batch_execute("REVOKE EXECUTE ON FUNCTION tle_probe() FROM PUBLIC")
        .expect("revoke");
    let err = user
        .batch_execute("SELECT tle_probe()")
        .expect_err("app_user called tle_probe() without EXECUTE");
    assert_eq!(sqlstate(&err), "42501", "{err}");
    admin
        .batch_execute(&format!("GRANT EXECUTE ON FUNCTION tle_probe() TO {USER}"))
        .expect("grant");
    assert_eq!(text(&mut user, "SELECT tle_probe()"), "1");

    // an update path, applied with ALTER EXTENSION ... UPDATE; the grant survives
    assert_eq!(
        text(
            &mut admin,
            "SELECT pgtle.install_update_path('tle_probe', '1.0', '1.1', \
             $_pg$ CREATE OR REPLACE FUNCTION tle_probe() RETURNS int LANGUAGE sql AS 'SELECT 2' $_pg$)"
        ),
        "t"
    );
    admin
        .batch_execute("ALTER EXTENSION tle_probe UPDATE TO '1.1'")
        .expect("ALTER EXTENSION tle_probe UPDATE as app_admin");
    assert_eq!(
        text(
            &mut admin,
            "SELECT extversion FROM pg_extension WHERE extname = 'tle_probe'"
        ),
        "1.1"
    );
    assert_eq!(text(&mut user, "SELECT tle_probe()"), "2");

    // pg_idem is a name pg_tle accepts on this server (no native control file)
    assert_eq!(
        text(
            &mut admin,
            "SELECT pgtle.install_extension('pg_idem', '0.0.1', 'probe', \
             $_pg$ CREATE FUNCTION pg_idem_tle_probe() RETURNS text LANGUAGE sql AS 'SELECT ''tle''' $_pg$)"
        ),
        "t"
    );
    assert_eq!(
        text(
            &mut admin,
            "SELECT default_version FROM pgtle.available_extensions() WHERE name = 'pg_idem'"
        ),
        "0.0.1"
    );
    admin
        .batch_execute("CREATE EXTENSION pg_idem")
        .expect("CREATE EXTENSION pg_idem (the probe TLE)");
    assert_eq!(text(&mut admin, "SELECT pg_idem_tle_probe()"), "tle");
    admin
        .batch_execute("DROP EXTENSION pg_idem")
        .expect("drop the probe pg_idem");
    assert_eq!(
        text(&mut admin, "SELECT pgtle.uninstall_extension('pg_idem')"),
        "t"
    );
    assert_eq!(
        text(
            &mut admin,
            "SELECT count(*) FROM pgtle.available_extensions() WHERE name = 'pg_idem'"
        ),
        "0"
    );

    admin
        .batch_execute("DROP EXTENSION tle_probe")
        .expect("drop tle_probe");
    assert_eq!(
        text(&mut admin, "SELECT pgtle.uninstall_extension('tle_probe')"),
        "t"
    );
}

#[test]
fn pg15_tree_is_managed_style() {
    tree_is_managed_style(PG15);
}

#[test]
fn pg18_tree_is_managed_style() {
    tree_is_managed_style(PG18);
}

#[test]
fn pg15_app_admin_registers_creates_and_updates_a_tle() {
    tle_lifecycle(PG15);
}

#[test]
fn pg18_app_admin_registers_creates_and_updates_a_tle() {
    tle_lifecycle(PG18);
}
