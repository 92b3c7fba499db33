//! Editions: one conformance suite for the native engine and the SQL edition.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use crate::*;

/// Which pg_idem the client suites run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edition {
    /// the library preloaded and `CREATE EXTENSION pg_idem` (the default)
    Native,
    /// the SQL edition's plain install (scripts/sql_edition.py): no library loaded
    Sql,
}

/// How the SQL edition is installed in a run of the client suites against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlInstall {
    /// `PG_IDEM_EDITION=sql`: the plain install file, run in one transaction (`psql -1 -f`, or
    /// a migration tool) by the customer's DBA [`CUSTOMER_ADMIN`], on the managed-style copy of
    /// the PostgreSQL under test (scripts/lib/managed_pg.sh: none of pg_idem's files; pg_tle is
    /// there but not loaded), or on the PostgreSQL under test itself where ../shared/pg_tle is
    /// missing or `PG_IDEM_SQL_SERVER=under-test` says so ([`sql_on_pg_under_test`])
    Plain,
    /// `PG_IDEM_EDITION=sql-tle`: as on Amazon RDS, Aurora or Supabase. The servers run from
    /// the managed-style copy of the PostgreSQL under test (scripts/lib/managed_pg.sh: pg_tle
    /// in it, none of pg_idem's files) with pg_tle preloaded; the customer's DBA
    /// [`CUSTOMER_ADMIN`] creates pg_tle, registers the package (`pgtle.install_extension`)
    /// and runs `CREATE EXTENSION pg_idem`
    Tle,
}

/// The customer's DBA in a run against the SQL edition, either way installed: LOGIN
/// NOSUPERUSER CREATEROLE CREATEDB REPLICATION, a member of `pgtle_admin` (in a `sql-tle` run),
/// owner of database `postgres`; it installs and so owns pg_idem, and the tests connect as it
/// ([`dba_role`]). After the service's setup ([`Server::set_up_managed_service`]) no
/// superuser is used, except for what only the service has (amcheck's checks, the service's
/// own maintenance, a rule about superusers) through [`Server::superuser_client_db`] or
/// [`superuser_twin`].
pub const CUSTOMER_ADMIN: &str = "customer_admin";

pub(crate) fn edition_setting() -> (Edition, SqlInstall) {
    static SETTING: OnceLock<(Edition, SqlInstall)> = OnceLock::new();
    *SETTING.get_or_init(
        || match std::env::var("PG_IDEM_EDITION").unwrap_or_default().trim() {
            "" | "native" => (Edition::Native, SqlInstall::Plain),
            "sql" => (Edition::Sql, SqlInstall::Plain),
            "sql-tle" => (Edition::Sql, SqlInstall::Tle),
            other => panic!("PG_IDEM_EDITION={other}: native (the default), sql or sql-tle"),
        },
    )
}

/// The role of the tests' own connections ([`Server::client`]), standing for the customer's
/// DBA: the superuser `postgres` natively, [`CUSTOMER_ADMIN`], who is not one (RDS's master
/// user), in a run against the SQL edition.
pub fn dba_role() -> &'static str {
    match edition() {
        Edition::Sql => CUSTOMER_ADMIN,
        Edition::Native => "postgres",
    }
}

/// The role that owns pg_idem in database `postgres` of a [`Server`]: the DBA ([`dba_role`]),
/// who runs `CREATE EXTENSION` or the plain install. The code of a DBA's trigger or rule on
/// `idem.*` runs as this role (pg_idem's functions write its tables as their owner), so a
/// fixture that has such code write a table of its own grants that table to it, as a DBA on a
/// managed service must.
pub fn pg_idem_owner() -> &'static str {
    dba_role()
}

/// The edition under test: `PG_IDEM_EDITION` = `native` (the default, also when unset or
/// empty), or `sql` or `sql-tle` (the SQL edition, installed as [`sql_install`] says); anything
/// else fails the test.
pub fn edition() -> Edition {
    edition_setting().0
}

/// How the SQL edition is installed when it is under test (see [`SqlInstall`]); `Plain`
/// natively.
pub fn sql_install() -> SqlInstall {
    edition_setting().1
}

/// `PG_IDEM_SQL_SERVER=under-test` in a `PG_IDEM_EDITION=sql` run: the servers run from the
/// PostgreSQL under test (PG_CONFIG's) instead of its managed-style copy, as where
/// ../shared/pg_tle is missing. The test command's SQL-edition steps on 14, 16 and 17 say so:
/// pg_tle is built for 15 and 18 alone, and the copy exists to keep the native files out of
/// reach, which the same suites prove on 15. Unset (or `managed`): the copy. Anything else, or
/// `under-test` with `sql-tle` (whose servers need pg_tle), fails the test.
pub fn sql_on_pg_under_test() -> bool {
    static SETTING: OnceLock<bool> = OnceLock::new();
    *SETTING.get_or_init(|| {
        match std::env::var("PG_IDEM_SQL_SERVER")
            .unwrap_or_default()
            .trim()
        {
            "" | "managed" => false,
            "under-test" if edition_setting() == (Edition::Sql, SqlInstall::Plain) => true,
            "under-test" => panic!("PG_IDEM_SQL_SERVER=under-test is for PG_IDEM_EDITION=sql only"),
            other => panic!("PG_IDEM_SQL_SERVER={other}: managed (the default) or under-test"),
        }
    })
}

/// Called first by a test of what only the native engine has (the engine's own heap writes,
/// shared-memory counters, the purge worker, GUC definitions, the library's loading ...):
/// under the SQL edition it records the test as skipped ([`skip_test`], dependency `native
/// edition`, with `reason`) and returns true, and the test returns:
/// `if native_only("shared-memory counters") { return; }`. Natively it returns false.
pub fn native_only(reason: &str) -> bool {
    if edition() == Edition::Native {
        return false;
    }
    skip_test("native edition", &format!("native edition only: {reason}"));
    true
}

/// The SQL edition, built once per test process by scripts/sql_edition.py from this source
/// tree (or from the tree `PG_IDEM_SQL_EDITION_SOURCE` names: a copy with a change to
/// sql/edition/ being tried) into a temporary directory.
pub struct SqlEdition {
    /// the plain install: run it in one transaction in a database (functions into `public`)
    pub plain: String,
    /// the pg_tle package (`pgtle.install_extension`)
    pub tle: String,
}

/// The SQL edition of this source tree (see [`SqlEdition`]).
pub fn sql_edition() -> &'static SqlEdition {
    static BUILT: OnceLock<SqlEdition> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = std::env::var_os("PG_IDEM_SQL_EDITION_SOURCE")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let out =
            std::env::temp_dir().join(format!("pg_idem_sql_edition_{}_{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        run_ok(
            Command::new("python3")
                .arg(root.join("scripts/sql_edition.py"))
                .arg("--out")
                .arg(&out),
            "scripts/sql_edition.py",
        );
        let file = |tle: bool| {
            let mut found = std::fs::read_dir(&out)
                .expect("the SQL edition's output")
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.to_string_lossy();
                    name.ends_with(".sql") && name.ends_with(".tle.sql") == tle
                });
            let path = found
                .next()
                .unwrap_or_else(|| panic!("scripts/sql_edition.py built no file (tle: {tle})"));
            std::fs::read_to_string(path).expect("read the SQL edition")
        };
        let built = SqlEdition {
            plain: file(false),
            tle: file(true),
        };
        let _ = std::fs::remove_dir_all(&out);
        built
    })
}

/// Creates pg_idem in the database `db` is connected to, as the edition under test installs
/// it: `CREATE EXTENSION pg_idem`, or the SQL edition's plain install in one transaction (run
/// by `db`'s role, who then owns pg_idem).
pub fn install_pg_idem(db: &mut Client) {
    install_edition(edition(), db);
}

/// [`install_pg_idem`] that may fail (a database pg_idem refuses); a failed plain install is
/// rolled back.
pub fn try_install_pg_idem(db: &mut Client) -> Result<(), postgres::Error> {
    try_install_edition(edition(), db)
}

pub(crate) fn install_edition(edition: Edition, db: &mut Client) {
    try_install_edition(edition, db).unwrap_or_else(|e| match (edition, sql_install()) {
        (Edition::Native, _) => panic!("CREATE EXTENSION pg_idem: {e:?}"),
        (Edition::Sql, SqlInstall::Plain) => panic!("the SQL edition's plain install: {e:?}"),
        (Edition::Sql, SqlInstall::Tle) => panic!("the SQL edition through pg_tle: {e:?}"),
    })
}

pub(crate) fn try_install_edition(
    edition: Edition,
    db: &mut Client,
) -> Result<(), postgres::Error> {
    match (edition, sql_install()) {
        (Edition::Native, _) => db.batch_execute("CREATE EXTENSION pg_idem"),
        (Edition::Sql, SqlInstall::Plain) => {
            let installed = db.batch_execute(&format!("BEGIN;\n{}\nCOMMIT;", sql_edition().plain));
            if installed.is_err() {
                let _ = db.batch_execute("ROLLBACK");
            }
            installed
        }
        (Edition::Sql, SqlInstall::Tle) => {
            let superuser = simple_one(
                db,
                "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user",
            )?;
            if superuser.as_deref() == Some("t") {
                // a test's own superuser connection: the administrator may create here
                db.batch_execute(&format!(
                    "DO $$ BEGIN
                         EXECUTE pg_catalog.format('GRANT CREATE ON DATABASE %I TO {CUSTOMER_ADMIN}',
                                                   pg_catalog.current_database());
                     END $$;
                     GRANT CREATE ON SCHEMA public TO {CUSTOMER_ADMIN};"
                ))?;
            }
            // trusted on a managed-style tree, as RDS lets its customers' administrator
            // create it
            db.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_tle")?;
            // the customer's administrator registers the package (once per database: pg_tle
            // keeps it there) and creates the extension
            let registered = simple_one(
                db,
                "SELECT count(*) FROM pgtle.available_extensions() WHERE name = 'pg_idem'",
            )?;
            let register = if registered.as_deref() == Some("0") {
                sql_edition().tle.as_str()
            } else {
                ""
            };
            let installed = db.batch_execute(&format!(
                "BEGIN; SET LOCAL ROLE {CUSTOMER_ADMIN};\n{register}\nCREATE EXTENSION pg_idem; COMMIT;"
            ));
            if installed.is_err() {
                let _ = db.batch_execute("ROLLBACK");
            }
            installed
        }
    }
}

impl Server {
    /// The service's side of a run against the SQL edition, as the superuser, once per server
    /// before any test connects: the customer's DBA [`CUSTOMER_ADMIN`], a login like RDS's
    /// master user (NOSUPERUSER with CREATEROLE and CREATEDB; REPLICATION, which RDS's
    /// rds_replication gives; `pg_monitor` and `pg_signal_backend` with the right to grant
    /// them, as `rds_superuser` has), owning database `postgres` (the customer's database);
    /// in a `sql-tle` run also pg_tle there and `pgtle_admin` for the DBA. pg_tle is trusted
    /// on a managed-style tree (scripts/lib/managed_pg.sh), so the DBA creates it in its other
    /// databases.
    pub(crate) fn set_up_managed_service(&self) {
        let tle = if sql_install() == SqlInstall::Tle {
            format!("CREATE EXTENSION pg_tle; GRANT pgtle_admin TO {CUSTOMER_ADMIN};")
        } else {
            String::new()
        };
        self.superuser_client_db("postgres")
            .batch_execute(&format!(
                "CREATE ROLE {CUSTOMER_ADMIN} LOGIN NOSUPERUSER CREATEROLE CREATEDB REPLICATION;
                 ALTER DATABASE postgres OWNER TO {CUSTOMER_ADMIN};
                 GRANT pg_monitor, pg_signal_backend TO {CUSTOMER_ADMIN} WITH ADMIN OPTION;
                 {tle}"
            ))
            .expect("the managed service's setup");
    }
}

/// pg_idem's settings that only a superuser may change natively (GUCs of context SUSET) and
/// that the SQL edition keeps in its table idem.settings instead, with their defaults there.
pub(crate) const OWNER_SETTINGS: &[(&str, &str)] = &[
    ("pg_idem.tenant_grants", "off"),
    ("pg_idem.max_key_length", "255"),
    ("pg_idem.max_response_bytes", "1048576"),
    ("pg_idem.max_batch_keys", "1000"),
];

/// The statement that sets one of pg_idem's owner-only settings (pg_idem.tenant_grants,
/// max_key_length, max_response_bytes, max_batch_keys) for database `postgres`, run by a
/// superuser there (`None`: back to the default). Natively `ALTER DATABASE postgres SET` (or
/// `RESET`): sessions connected from then on. In the SQL edition its row of idem.settings,
/// inserted or updated (a missing row is the default; `None` writes the default out): every
/// session, from its next statement; a size such as '1kB' is stored in bytes, as the GUC reads
/// it. For a setup script that must hold it (the pooler's, run before the pooler connects);
/// otherwise [`Server::set_owner_setting`].
pub fn owner_setting_sql(name: &str, value: Option<&str>) -> String {
    let default = OWNER_SETTINGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, default)| *default)
        .unwrap_or_else(|| panic!("{name} is not one of pg_idem's owner-only settings"));
    let quoted = |v: &str| format!("'{}'", v.replace('\'', "''"));
    match (edition(), value) {
        (Edition::Native, Some(value)) => {
            format!("ALTER DATABASE postgres SET {name} = {}", quoted(value))
        }
        (Edition::Native, None) => format!("ALTER DATABASE postgres RESET {name}"),
        (Edition::Sql, value) => {
            let value = quoted(value.unwrap_or(default));
            let value = if name == "pg_idem.max_response_bytes" {
                format!("pg_catalog.pg_size_bytes({value})::text")
            } else {
                value
            };
            format!(
                "INSERT INTO idem.settings (name, value) VALUES ('{name}', {value}) \
                 ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value"
            )
        }
    }
}

impl Server {
    /// Sets one of pg_idem's owner-only settings for database `postgres`, as its administrator
    /// does in the edition under test; see [`owner_setting_sql`].
    pub fn set_owner_setting(&self, name: &str, value: &str) {
        let sql = owner_setting_sql(name, Some(value));
        self.client()
            .batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }

    /// Puts an owner-only setting back to its default (see [`owner_setting_sql`]).
    pub fn reset_owner_setting(&self, name: &str) {
        let sql = owner_setting_sql(name, None);
        self.client()
            .batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }

    /// pg_idem.tenant_grants on for database `postgres` (see [`owner_setting_sql`]).
    pub fn tenant_grants_on(&self) {
        self.set_owner_setting("pg_idem.tenant_grants", "on");
    }
}

/// Sets a limit (pg_idem.max_key_length, max_response_bytes, max_batch_keys) for the session
/// `db` (a superuser's, in database `postgres`): natively `SET` in that session; in the SQL
/// edition, which has no session-level limits, its row of idem.settings (so for every session).
pub fn set_limit(db: &mut Client, name: &str, value: &str) {
    let sql = match edition() {
        Edition::Native => {
            owner_setting_sql(name, Some(value)); // a name it knows
            format!("SET {name} = '{}'", value.replace('\'', "''"))
        }
        Edition::Sql => owner_setting_sql(name, Some(value)),
    };
    db.batch_execute(&sql)
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}
