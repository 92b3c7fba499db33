//! Test servers for the client suites: each test starts its own PostgreSQL with the installed
//! pg_idem (as the `postgres` OS user when run as root), on a free port, and stops it when the
//! `Server` is dropped, panic or not. With `PG_IDEM_EDITION=sql` (or `sql-tle`) the same suites
//! run against the SQL edition instead (see [`edition`] and [`sql_install`]; [`native_only`] for
//! the tests that cannot).

pub mod workload;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use postgres::{Client, GenericClient, NoTls};

pub mod managed;

/// Where test servers live: world-traversable, so the `postgres` user reaches its data dirs.
const ROOT: &str = "/tmp/pg_idem_tests";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn running_as_root() -> bool {
    static ROOT_USER: OnceLock<bool> = OnceLock::new();
    *ROOT_USER.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false)
    })
}

/// A command run as the server's OS user.
/// A RUST_BACKTRACE inherited by the server would append Rust backtraces to error details.
pub fn as_server_user(program: &Path) -> Command {
    let mut cmd = if running_as_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(program);
        cmd
    } else {
        Command::new(program)
    };
    cmd.env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE");
    cmd
}

fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The major version of the PostgreSQL pg_idem is installed into (PG_CONFIG's).
pub fn major() -> u32 {
    static MAJOR: OnceLock<u32> = OnceLock::new();
    *MAJOR.get_or_init(|| {
        let pg_config = std::env::var("PG_CONFIG").unwrap_or_else(|_| "pg_config".into());
        let version = run_ok(
            Command::new(&pg_config).arg("--version"),
            "pg_config --version",
        );
        let text = String::from_utf8_lossy(&version.stdout);
        let digits: String = text
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("pg_config --version: {text}"))
    })
}

/// The version this source tree builds: the extension crate's, in its Cargo.toml (what a fresh
/// `CREATE EXTENSION` installs, and the SQL edition's version).
pub fn current_version() -> String {
    let manifest =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
            .expect("read Cargo.toml");
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("a version line in Cargo.toml")
        .to_string()
}

/// The PostgreSQL binaries pg_idem is installed into.
pub fn bindir() -> PathBuf {
    static BINDIR: OnceLock<PathBuf> = OnceLock::new();
    BINDIR
        .get_or_init(|| {
            if edition() == Edition::Sql {
                // the managed-style copy of this PostgreSQL: no pg_idem file in it (so that
                // nothing of the native edition can be used by mistake), pg_tle built in
                match (managed::managed_tree(major()), sql_install()) {
                    (Ok(bindir), _) => return bindir,
                    (Err(e), SqlInstall::Tle) => {
                        panic!("PG_IDEM_EDITION=sql-tle needs a managed-style PostgreSQL: {e}")
                    }
                    // without ../shared/pg_tle the plain install runs on the PostgreSQL under
                    // test, where the native files are but nothing loads them
                    (Err(_), SqlInstall::Plain) => {}
                }
            }
            let pg_config = std::env::var("PG_CONFIG").unwrap_or_else(|_| "pg_config".into());
            let major = major();
            // pg_config's own bindir: Debian's reports /usr/lib/postgresql/NN/bin, a relocatable
            // build its own folder; Debian's server-side layout is the fallback
            let out = run_ok(
                Command::new(&pg_config).arg("--bindir"),
                "pg_config --bindir",
            );
            let own = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            if own.join("initdb").exists() {
                return own;
            }
            let debian = PathBuf::from(format!("/usr/lib/postgresql/{major}/bin"));
            if debian.join("initdb").exists() {
                return debian;
            }
            own
        })
        .clone()
}

fn check_installed() {
    if edition() == Edition::Sql {
        // the SQL edition is built from the source tree (sql_edition()); nothing installed
        return;
    }
    let out = run_ok(
        Command::new(std::env::var("PG_CONFIG").unwrap_or_else(|_| "pg_config".into()))
            .arg("--sharedir"),
        "pg_config",
    );
    let control = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        .join("extension/pg_idem.control");
    assert!(
        control.exists(),
        "pg_idem is not installed ({} is missing): run scripts/install.sh --debug first",
        control.display()
    );
}

/// An initdb'ed data directory that every test server starts from as a copy.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        check_installed();
        std::fs::create_dir_all(ROOT).expect("create test root");
        let _ = Command::new("chmod").args(["1777", ROOT]).status();
        // shared by every test process; built under a private name, then renamed into place
        // one template per PostgreSQL installation (several may be tested on one machine)
        let installation: String = bindir()
            .to_string_lossy()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let template = PathBuf::from(ROOT).join(format!("template{installation}"));
        if template.join("PG_VERSION").exists() {
            return template;
        }
        let building =
            PathBuf::from(ROOT).join(format!("template-building-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&building);
        let mut cmd = as_server_user(&bindir().join("initdb"));
        cmd.args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "-D",
        ])
        .arg(&building);
        run_ok(&mut cmd, "initdb");
        if std::fs::rename(&building, &template).is_err() {
            // another test process got there first
            let _ = std::fs::remove_dir_all(&building);
        }
        template
    })
}

/// A running test server.
pub struct Server {
    dir: PathBuf,
    pub port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Server {
    /// Starts a server with pg_idem in database `postgres` and the given extra postgresql.conf
    /// lines: natively pg_idem preloaded and `CREATE EXTENSION pg_idem`; under
    /// `PG_IDEM_EDITION=sql` (see [`edition`]) nothing preloaded and the SQL edition's plain
    /// install run by the superuser `postgres` in one transaction; under `sql-tle` a
    /// managed-style server (pg_tle preloaded) and the SQL edition through pg_tle, registered
    /// and created by a role that is not a superuser (see [`SqlInstall::Tle`]).
    pub fn start(conf: &[&str]) -> Server {
        Server::start_as(edition(), conf)
    }

    /// [`Server::start`] with the given edition, whatever `PG_IDEM_EDITION` says (a test that
    /// compares the two editions).
    pub fn start_as(edition: Edition, conf: &[&str]) -> Server {
        let server = match edition {
            Edition::Native if edition_setting().1 == SqlInstall::Tle => panic!(
                "PG_IDEM_EDITION=sql-tle: this test process runs a managed-style PostgreSQL, \
                 which has no native pg_idem"
            ),
            Edition::Native => {
                Server::start_bare(&[&["shared_preload_libraries = 'pg_idem'"], conf].concat())
            }
            Edition::Sql => Server::start_bare(conf),
        };
        install_edition(edition, &mut server.client());
        if edition == Edition::Sql
            && conf
                .iter()
                .any(|line| line.trim_start().starts_with("pg_idem.purge_interval"))
        {
            // a test that sets the purge worker's interval decides when keys are purged (the
            // worker paused, or its passes awaited): the SQL edition's purge in passing, which
            // purges at random calls, is switched off for it
            server
                .client()
                .batch_execute(
                    "INSERT INTO idem.settings (name, value) VALUES ('pg_idem.purge_in_passing', 'off') \
                     ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                )
                .expect("pg_idem.purge_in_passing off");
        }
        server
    }

    /// Starts a server with only the given extra postgresql.conf lines (no preload, no extension).
    pub fn start_bare(conf: &[&str]) -> Server {
        let template = template();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(ROOT).join(format!("srv-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create server dir");
        let _ = Command::new("chmod").args(["777"]).arg(&dir).status();
        run_ok(
            Command::new("cp")
                .arg("-a")
                .arg(template)
                .arg(dir.join("data")),
            "copy template",
        );
        let mut server = Server { dir, port: 0 };
        let mut last_error = String::new();
        for _ in 0..3 {
            server.port = free_port();
            let mut lines = vec![
                format!("port = {}", server.port),
                "listen_addresses = '127.0.0.1'".to_string(),
                format!("unix_socket_directories = '{}'", server.dir.display()),
                "max_connections = 200".to_string(),
                "log_line_prefix = '%m [%p] %b '".to_string(),
            ];
            if edition() == Edition::Sql && sql_install() == SqlInstall::Tle {
                // as a managed service preloads it (RDS: a parameter group's setting); a test's
                // own shared_preload_libraries, later in the file, wins
                lines.push("shared_preload_libraries = 'pg_tle'".to_string());
            }
            lines.extend(conf.iter().map(|s| s.to_string()));
            server.write_conf(&lines);
            match server.pg_ctl(&["-w", "-t", "60", "start"]) {
                Ok(()) => {
                    if edition() == Edition::Sql {
                        server.set_up_managed_service();
                    }
                    return server;
                }
                Err(e) => last_error = e,
            }
        }
        panic!("server did not start: {last_error}\n{}", server.log());
    }

    fn conf_path(&self) -> PathBuf {
        self.dir.join("data/postgresql.auto.conf")
    }

    /// Appends settings (postgresql.auto.conf: later lines win); apply with `reload` or a restart.
    pub fn write_conf(&self, lines: &[String]) {
        let mut text = std::fs::read_to_string(self.conf_path()).unwrap_or_default();
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(self.conf_path(), text).expect("write conf");
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let mut cmd = as_server_user(&bindir().join("pg_ctl"));
        cmd.arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.log_path())
            .args(args);
        let out = cmd.output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// How the tests' own connections (the DBA's, see [`dba_role`]) reach database `dbname`. A
    /// statement that hangs fails its test after a minute instead of hanging the suite.
    pub fn conninfo(&self, dbname: &str) -> String {
        self.conninfo_as(dba_role(), dbname)
    }

    fn conninfo_as(&self, role: &str, dbname: &str) -> String {
        conninfo_for(self.port, role, dbname)
    }

    /// A new connection as the bootstrap superuser `postgres` to database `dbname`: the
    /// service's side of a `sql-tle` run (RDS's `rdsadmin`, which customers never get), for
    /// setting a server up and for what only a superuser may look at; elsewhere the same role
    /// as [`Server::client`]'s.
    pub fn superuser_client_db(&self, dbname: &str) -> Client {
        Client::connect(&self.conninfo_as("postgres", dbname), NoTls)
            .unwrap_or_else(|e| panic!("connect to {dbname} as the superuser: {e}"))
    }

    /// A new connection to database `postgres` as the DBA ([`dba_role`]).
    pub fn client(&self) -> Client {
        self.client_db("postgres")
    }

    pub fn client_db(&self, dbname: &str) -> Client {
        Client::connect(&self.conninfo(dbname), NoTls)
            .unwrap_or_else(|e| panic!("connect to {dbname}: {e}"))
    }

    /// A new connection as `role`.
    pub fn client_as(&self, role: &str) -> Client {
        Client::connect(&self.conninfo_as(role, "postgres"), NoTls)
            .unwrap_or_else(|e| panic!("connect as {role}: {e}"))
    }

    /// SIGHUP: the server and its workers reload the configuration.
    pub fn reload(&self) {
        self.pg_ctl(&["reload"]).expect("reload");
    }

    pub fn stop(&self, mode: &str) {
        self.pg_ctl(&["-m", mode, "-w", "stop"]).expect("stop");
    }

    pub fn start_again(&self) {
        self.pg_ctl(&["-w", "-t", "60", "start"])
            .expect("start again");
    }

    /// Runs a program of the server's bin directory (pg_dump, psql, ...) as the server user.
    pub fn run_bin(&self, program: &str, args: &[&str]) -> Output {
        let mut cmd = as_server_user(&bindir().join(program));
        cmd.args(args);
        cmd.output().unwrap_or_else(|e| panic!("{program}: {e}"))
    }

    /// Kills a backend with SIGKILL and returns a connection made after the postmaster has
    /// reinitialised (needs `restart_after_crash = on`). A connection made before the postmaster
    /// reaps the killed child would be reset by the crash restart, so this waits for the log line
    /// the postmaster writes once every process is gone, and only then connects.
    pub fn crash_backend(&self, pid: i32) -> Client {
        const RESTART: &str = "all server processes terminated; reinitializing";
        let restarts_before = self.log().matches(RESTART).count();
        kill_9(pid);
        wait_for(
            "the postmaster to reinitialise after the crash",
            Duration::from_secs(60),
            || self.log().matches(RESTART).count() > restarts_before,
        );
        let mut client = None;
        wait_for(
            "the server to accept connections after crash recovery",
            Duration::from_secs(60),
            || {
                client = Client::connect(&self.conninfo("postgres"), NoTls)
                    .ok()
                    .filter(|c| !c.is_closed());
                client.is_some()
            },
        );
        client.unwrap()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends SIGKILL to a server process (a backend or a worker).
pub fn kill_9(pid: i32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -9 {pid} failed");
}

/// The SQLSTATE of a failed statement ("" when the error did not come from the server).
pub fn sqlstate(error: &postgres::Error) -> String {
    error
        .code()
        .map(|c| c.code().to_string())
        .unwrap_or_default()
}

/// Waits until `condition` holds, polling; panics with `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every row of idem.keys as text, in key order: for comparing the whole store before and after.
/// Each row is a jsonb object, whose keys are the column names in jsonb's own order: the same for
/// tables whose columns are in different orders (an updated one and a fresh install's).
pub fn all_keys(db: &mut Client) -> Vec<String> {
    db.column(
        "SELECT pg_catalog.to_jsonb(k)::text FROM idem.keys k ORDER BY tenant, key",
        &[],
    )
}

/// One row of idem_claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub outcome: String,
    pub fence: Option<i64>,
    pub attempt: Option<i32>,
    pub response_code: Option<i32>,
    /// response_body as jsonb text
    pub response_body: Option<String>,
    pub checkpoint_phase: Option<String>,
    pub checkpoint_data: Option<String>,
}

const CLAIM_SQL: &str = "SELECT outcome, fence, attempt, response_code, response_body::text, \
     checkpoint_phase, checkpoint_data::text FROM idem_claim($1, $2, $3, $4::text::interval, $5::text::interval)";

fn claim_from_row(row: &postgres::Row) -> Claim {
    Claim {
        outcome: row.get(0),
        fence: row.get(1),
        attempt: row.get(2),
        response_code: row.get(3),
        response_body: row.get(4),
        checkpoint_phase: row.get(5),
        checkpoint_data: row.get(6),
    }
}

/// The first column of every row a query returns (a list of texts, numbers, ...), for any
/// `postgres::GenericClient` (a Client or a Transaction); panics naming the query when it fails.
pub trait Column {
    fn column<T: for<'a> postgres::types::FromSql<'a>>(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Vec<T>;
}

impl<C: GenericClient> Column for C {
    fn column<T: for<'a> postgres::types::FromSql<'a>>(
        &mut self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Vec<T> {
        self.query(sql, params)
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|row| row.get(0))
            .collect()
    }
}

/// idem_claim with optional lease and ttl (as interval text such as "100 ms").
pub fn try_claim(
    db: &mut impl GenericClient,
    tenant: &str,
    key: &str,
    hash: &str,
    lease: Option<&str>,
    ttl: Option<&str>,
) -> Result<Claim, postgres::Error> {
    db.query_one(CLAIM_SQL, &[&tenant, &key, &hash, &lease, &ttl])
        .map(|r| claim_from_row(&r))
}

pub fn claim(db: &mut impl GenericClient, tenant: &str, key: &str, hash: &str) -> Claim {
    try_claim(db, tenant, key, hash, None, None).expect("idem_claim")
}

pub fn claim_with(
    db: &mut impl GenericClient,
    tenant: &str,
    key: &str,
    hash: &str,
    lease: &str,
    ttl: Option<&str>,
) -> Claim {
    try_claim(db, tenant, key, hash, Some(lease), ttl).expect("idem_claim")
}

pub fn try_complete(
    db: &mut impl GenericClient,
    tenant: &str,
    key: &str,
    fence: i64,
    code: i32,
    body: &str,
) -> Result<(), postgres::Error> {
    db.query_one(
        "SELECT idem_complete($1, $2, $3, $4, $5::text::jsonb)",
        &[&tenant, &key, &fence, &code, &body],
    )
    .map(|_| ())
}

pub fn complete(
    db: &mut impl GenericClient,
    tenant: &str,
    key: &str,
    fence: i64,
    code: i32,
    body: &str,
) {
    try_complete(db, tenant, key, fence, code, body).expect("idem_complete")
}

// ---------------------------------------------------------------------------------------------
// Editions: one conformance suite for the native engine and the SQL edition
// ---------------------------------------------------------------------------------------------

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
    /// there but not loaded), or where ../shared/pg_tle is missing on the PostgreSQL under
    /// test itself
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

fn edition_setting() -> (Edition, SqlInstall) {
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

fn install_edition(edition: Edition, db: &mut Client) {
    try_install_edition(edition, db).unwrap_or_else(|e| match (edition, sql_install()) {
        (Edition::Native, _) => panic!("CREATE EXTENSION pg_idem: {e:?}"),
        (Edition::Sql, SqlInstall::Plain) => panic!("the SQL edition's plain install: {e:?}"),
        (Edition::Sql, SqlInstall::Tle) => panic!("the SQL edition through pg_tle: {e:?}"),
    })
}

fn try_install_edition(edition: Edition, db: &mut Client) -> Result<(), postgres::Error> {
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
    fn set_up_managed_service(&self) {
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
const OWNER_SETTINGS: &[(&str, &str)] = &[
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

// ---------------------------------------------------------------------------------------------
// Tests that need what a machine may not have
// ---------------------------------------------------------------------------------------------

/// Called by a test that cannot run here because `dependency` is missing, right before it
/// returns without checking anything; `reason` says what is missing and how to get it. The
/// dependencies: `citus` (tests/citus.rs), `faketime` (the clock tests of tests/failover.rs),
/// `prlimit` (a backend's memory limit in tests/hardening.rs), `pg_upgrade` (the two bin
/// directories tests/pg_upgrade.rs needs), `pg_tle` (the managed-style servers of
/// tests/harness/managed.rs), `native edition` (a test of what only the native engine has, run
/// under `PG_IDEM_EDITION=sql`: see [`native_only`]).
///
/// cargo counts such a test as passed, so the skip is recorded where the test command counts
/// it: a line `SKIPPED: <suite>::<test>: <reason>` on stderr (shown with --nocapture) and
/// appended to the file `PG_IDEM_SKIP_LOG` names, if set (scripts/test.sh sets it per step,
/// counts its lines as skipped and takes them off the step's passed). When `PG_IDEM_REQUIRE`
/// (names separated by commas) names `dependency`, the test fails instead: scripts/test.sh names
/// there what it installs itself (faketime from setup.sh, Citus where ../shared/citus exists),
/// so a missing one is a fault of the machine, not a reason to skip.
pub fn skip_test(dependency: &str, reason: &str) {
    let required = std::env::var("PG_IDEM_REQUIRE").unwrap_or_default();
    if required.split(',').any(|name| name.trim() == dependency) {
        panic!("{dependency} is missing, and PG_IDEM_REQUIRE says this test must run: {reason}");
    }
    // libtest names each test's thread after the test; the binary is `<suite>-<hash>`
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    let suite = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((suite, _hash)) => suite.to_string(),
            None => stem,
        })
        .unwrap_or_default();
    let reason = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = format!("SKIPPED: {suite}::{test}: {reason}\n");
    eprint!("{line}");
    if let Ok(log) = std::env::var("PG_IDEM_SKIP_LOG") {
        use std::io::Write;
        // one write per line, in append mode: lines of tests running at once stay whole
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut file| file.write_all(line.as_bytes()))
            .unwrap_or_else(|e| panic!("PG_IDEM_SKIP_LOG {log}: {e}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Citus clusters
// ---------------------------------------------------------------------------------------------

/// Whether Citus is installed into the PostgreSQL under test (its citus.so in pkglibdir).
pub fn citus_available() -> bool {
    let pg_config = std::env::var("PG_CONFIG").unwrap_or_else(|_| "pg_config".into());
    let out = run_ok(
        Command::new(&pg_config).arg("--pkglibdir"),
        "pg_config --pkglibdir",
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        .join("citus.so")
        .exists()
}

/// A Citus cluster of test servers: a coordinator and worker nodes, each its own server on a
/// free port, with pg_idem created on the coordinator (Citus propagates it) and distributed with
/// `idem_distribute(shard_count)`. Stopped when dropped.
pub struct Cluster {
    pub coordinator: Server,
    pub workers: Vec<Server>,
}

impl Cluster {
    /// `conf`: extra postgresql.conf lines for every node; `shard_count` None leaves pg_idem
    /// undistributed (the caller runs idem_distribute).
    pub fn start(workers: usize, shard_count: Option<i32>, conf: &[&str]) -> Cluster {
        let lines = [
            &[
                "shared_preload_libraries = 'citus,pg_idem'",
                "max_prepared_transactions = 100",
                "wal_level = logical",
            ],
            conf,
        ]
        .concat();
        let coordinator = Server::start_bare(&lines);
        let workers: Vec<Server> = (0..workers).map(|_| Server::start_bare(&lines)).collect();
        for node in std::iter::once(&coordinator).chain(&workers) {
            node.client()
                .batch_execute("CREATE EXTENSION citus")
                .expect("create extension citus");
        }
        let mut db = coordinator.client();
        db.execute(
            "SELECT citus_set_coordinator_host('127.0.0.1', $1)",
            &[&i32::from(coordinator.port)],
        )
        .expect("citus_set_coordinator_host");
        for worker in &workers {
            db.execute(
                "SELECT citus_add_node('127.0.0.1', $1)",
                &[&i32::from(worker.port)],
            )
            .expect("citus_add_node");
        }
        db.batch_execute("CREATE EXTENSION pg_idem")
            .expect("create extension pg_idem");
        if let Some(shard_count) = shard_count {
            db.execute("SELECT idem_distribute($1)", &[&shard_count])
                .expect("idem_distribute");
        }
        Cluster {
            coordinator,
            workers,
        }
    }

    /// The worker node that holds `tenant`'s keys.
    pub fn node_of(&self, tenant: &str) -> &Server {
        let port: i32 = self
            .coordinator
            .client()
            .query_one(
                "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) \
                  WHERE p.shardid = get_shard_id_for_distribution_column('idem.keys', $1::text)",
                &[&tenant],
            )
            .expect("the node of a tenant")
            .get(0);
        self.workers
            .iter()
            .find(|w| i32::from(w.port) == port)
            .expect("a worker of this cluster")
    }

    /// Tenants named `{prefix}{n}` until one is found on each worker node, in worker order.
    pub fn tenant_per_worker(&self, prefix: &str) -> Vec<String> {
        let mut found: Vec<Option<String>> = vec![None; self.workers.len()];
        for n in 0..1000 {
            let tenant = format!("{prefix}{n}");
            let port = self.node_of(&tenant).port;
            let i = self
                .workers
                .iter()
                .position(|w| w.port == port)
                .expect("a worker");
            found[i].get_or_insert(tenant);
            if found.iter().all(Option::is_some) {
                break;
            }
        }
        found
            .into_iter()
            .map(|t| t.expect("a tenant on every worker"))
            .collect()
    }
}

/// The fields of a composite value in PostgreSQL's text form, `(a,"b c",,...)`; None for an
/// empty (NULL) field.
pub fn record_fields(text: &str) -> Vec<Option<String>> {
    let inner = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not a record: {text}"));
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut was_quoted = false;
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                current.push('"');
                chars.next();
            }
            '\\' if quoted => {
                if let Some(next) = chars.next() {
                    current.push(next);
                }
            }
            '"' => {
                quoted = !quoted;
                was_quoted = true;
            }
            ',' if !quoted => {
                fields.push(if current.is_empty() && !was_quoted {
                    None
                } else {
                    Some(std::mem::take(&mut current))
                });
                was_quoted = false;
            }
            c => current.push(c),
        }
    }
    fields.push(if current.is_empty() && !was_quoted {
        None
    } else {
        Some(current)
    });
    fields
}

/// The first column of the first row of a simple-protocol query, as text.
pub fn simple_one(db: &mut Client, sql: &str) -> Result<Option<String>, postgres::Error> {
    for message in db.simple_query(sql)? {
        if let postgres::SimpleQueryMessage::Row(row) = message {
            return Ok(row.get(0).map(str::to_string));
        }
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------------
// Storage checks
// ---------------------------------------------------------------------------------------------

/// When `db`'s role is not a superuser ([`dba_role`] in a `sql-tle` run): a connection as the
/// superuser to the same server and database, for what only the service may look at; None
/// when `db` may do it itself.
pub fn superuser_twin(db: &mut Client) -> Option<Client> {
    let row = db
        .query_one(
            "SELECT r.rolsuper, pg_catalog.current_setting('port'), pg_catalog.current_database()::text \
               FROM pg_catalog.pg_roles AS r WHERE r.rolname = current_user",
            &[],
        )
        .expect("who the connection is");
    if row.get::<_, bool>(0) {
        return None;
    }
    let (port, dbname): (String, String) = (row.get(1), row.get(2));
    let port: u16 = port.parse().expect("the server's port");
    Some(
        Client::connect(&conninfo_for(port, "postgres", &dbname), NoTls)
            .unwrap_or_else(|e| panic!("connect to {dbname} as the superuser: {e}")),
    )
}

/// How a test connects to a server on 127.0.0.1 as `role`: a statement that hangs fails its
/// test after a minute instead of hanging the suite.
fn conninfo_for(port: u16, role: &str, dbname: &str) -> String {
    format!(
        "host=127.0.0.1 port={port} user={role} dbname={dbname} connect_timeout=10 options='-c statement_timeout=60s'"
    )
}

/// Checks pg_idem's tables the way PostgreSQL checks its own storage (amcheck): every heap page
/// and TOAST value of idem.keys, idem.watermarks and idem.tenant_grants (`verify_heapam`), and
/// every index on them, which must be valid, with `bt_index_parent_check(heapallindexed)`: each
/// index entry in its place, and an entry for every heap tuple. Panics with what amcheck found.
/// In a `sql-tle` run the checks run as the superuser (the service's side: amcheck is theirs
/// to run, not the customer's), in the database `db` is connected to.
pub fn amcheck(db: &mut Client) {
    let mut checker = superuser_twin(db);
    let db = checker.as_mut().unwrap_or(db);
    db.batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        .expect("CREATE EXTENSION amcheck");
    for table in ["idem.keys", "idem.watermarks", "idem.tenant_grants"] {
        let corrupt: Vec<String> = db
            .query(
                "SELECT format('block %s, offset %s, attribute %s: %s', v.blkno, v.offnum, v.attnum, v.msg) \
                   FROM verify_heapam($1::text::regclass, check_toast => true) AS v",
                &[&table],
            )
            .unwrap_or_else(|e| panic!("verify_heapam({table}): {e:?}"))
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            corrupt.is_empty(),
            "verify_heapam({table}):\n{}",
            corrupt.join("\n")
        );
        let indexes: Vec<(String, bool)> = db
            .query(
                "SELECT i.indexrelid::regclass::text, i.indisvalid FROM pg_index AS i \
                  WHERE i.indrelid = $1::text::regclass ORDER BY 1",
                &[&table],
            )
            .expect("the indexes of a pg_idem table")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        for (index, valid) in indexes {
            assert!(
                valid,
                "{index} is not valid (a failed CREATE INDEX or REINDEX CONCURRENTLY left it)"
            );
            db.execute(
                "SELECT bt_index_parent_check($1::text::regclass, heapallindexed => true)",
                &[&index],
            )
            .unwrap_or_else(|e| panic!("bt_index_parent_check({index}): {e:?}"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Streaming replication
// ---------------------------------------------------------------------------------------------

impl Server {
    /// A streaming hot standby of this server, made with `pg_basebackup -R` over a replication
    /// connection to 127.0.0.1, connecting back as `application_name` (the name
    /// `synchronous_standby_names` on this server can list), with the given extra
    /// postgresql.conf lines on top of the primary's (the standby's own port and socket
    /// directory, `hot_standby = on`). Started and accepting read-only connections when this
    /// returns; stopped and removed when dropped. The primary needs `wal_level` replica or
    /// logical and free WAL senders (PostgreSQL's defaults do).
    pub fn standby(&self, application_name: &str, conf: &[&str]) -> Server {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(ROOT).join(format!("srv-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create standby dir");
        let _ = Command::new("chmod").args(["777"]).arg(&dir).status();
        let data = dir.join("data");
        let primary = format!(
            "host=127.0.0.1 port={} user=postgres application_name={application_name}",
            self.port
        );
        let data_arg = data.to_string_lossy().to_string();
        let out = self.run_bin(
            "pg_basebackup",
            &[
                "-D", &data_arg, "-R", "-X", "stream", "-c", "fast", "-d", &primary,
            ],
        );
        assert!(
            out.status.success(),
            "pg_basebackup failed: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut standby = Server { dir, port: 0 };
        let mut last_error = String::new();
        for _ in 0..3 {
            standby.port = free_port();
            let mut lines = vec![
                format!("port = {}", standby.port),
                format!("unix_socket_directories = '{}'", standby.dir.display()),
                format!("primary_conninfo = '{primary}'"),
                "hot_standby = on".to_string(),
            ];
            lines.extend(conf.iter().map(|s| s.to_string()));
            standby.write_conf(&lines);
            match standby.pg_ctl(&["-w", "-t", "60", "start"]) {
                Ok(()) => return standby,
                Err(e) => last_error = e,
            }
        }
        panic!("standby did not start: {last_error}\n{}", standby.log());
    }

    /// Promotes a standby (`pg_ctl promote`, waiting until it accepts writes).
    pub fn promote(&self) {
        self.pg_ctl(&["-w", "-t", "60", "promote"])
            .expect("promote");
    }

    /// Waits until this standby has replayed the primary's WAL up to where the primary has
    /// written it now (`pg_current_wal_lsn()` on `primary`), at most `timeout`.
    pub fn wait_for_replay(&self, primary: &mut Client, timeout: Duration) {
        let target: String = primary
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .expect("pg_current_wal_lsn")
            .get(0);
        let mut db = self.client();
        wait_for(
            &format!("the standby to replay up to {target}"),
            timeout,
            || {
                db.query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&target],
                )
                .map(|r| r.get::<_, Option<bool>>(0) == Some(true))
                .unwrap_or(false)
            },
        );
    }
}

impl Server {
    /// Starts this stopped server again (as `start_again`) with extra environment variables for
    /// its postmaster and so for every server process, e.g. libfaketime's `LD_PRELOAD` and
    /// `FAKETIME` to give it a clock of its own.
    pub fn start_again_with_env(&self, env: &[(&str, &str)]) {
        let mut cmd = as_server_user(&bindir().join("pg_ctl"));
        cmd.arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.log_path())
            .args(["-w", "-t", "60", "start"]);
        for (name, value) in env {
            cmd.env(name, value);
        }
        run_ok(&mut cmd, "start again with environment");
    }
}

/// The oldest released version, whose install script `sql/pg_idem--0.1.0.sql` keeps frozen:
/// upgrade tests start from it.
pub const RELEASED: &str = "0.1.0";

/// Puts the frozen install script of the released version next to the installed extension:
/// packages ship only upgrade scripts, so a test that starts from 0.1.0 installs it itself.
pub fn install_released_script() {
    let pg_config = std::env::var("PG_CONFIG").unwrap_or_else(|_| "pg_config".into());
    let out = Command::new(&pg_config)
        .arg("--sharedir")
        .output()
        .expect("pg_config --sharedir");
    let target = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        .join(format!("extension/pg_idem--{RELEASED}.sql"));
    let source =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../sql/pg_idem--{RELEASED}.sql"));
    let frozen = std::fs::read(&source).expect("the frozen install script of 0.1.0");
    if std::fs::read(&target).ok().as_deref() != Some(&frozen[..]) {
        std::fs::write(&target, &frozen)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", target.display()));
    }
}
