//! "Managed-style" test servers for the SQL edition: PostgreSQL set up the way Amazon RDS and
//! Aurora (and, alike, Supabase) offer it to a customer, so that tests install and use pg_idem
//! the only way such a service allows: as a Trusted Language Extension through pg_tle, by a
//! role that is not a superuser.
//!
//! What differs from [`crate::Server`]:
//! - the server runs from a PostgreSQL tree made by `scripts/lib/managed_pg.sh`: a copy of that
//!   version's PostgreSQL with no pg_idem file in it (a service ships no third-party native
//!   extension, and pg_tle refuses to register a name whose control file exists) and with pg_tle
//!   installed;
//! - pg_tle is preloaded (`shared_preload_libraries`), as on RDS where it is a parameter-group
//!   setting;
//! - the customer's side is two ordinary roles, `app_admin` (RDS's master user:
//!   `rds_superuser` minus superuser) and `app_user` (an application's login), and database
//!   `app`. The bootstrap superuser `postgres` (RDS's `rdsadmin`, which customers never get)
//!   only sets the server up; tests use the two roles.
//!
//! Stopped, and its directory removed, when dropped, as `Server` is.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::Ordering;

use crate::{
    as_server_user, connect_seeded, free_port, initdb_command, run_ok, skip_test, sql_edition,
    Client, Server, COUNTER, ROOT,
};

/// The database the tests use; owned by `app_admin`, as a database an RDS customer creates.
pub const DATABASE: &str = "app";

/// The customer's administrator: LOGIN NOSUPERUSER CREATEROLE NOCREATEDB, member of
/// `pgtle_admin`, owner of database `app` (so of its `public` schema on PostgreSQL 15+).
pub const ADMIN: &str = "app_admin";

/// An application's login: LOGIN NOSUPERUSER, no other attribute or membership; what it may do
/// is what `app_admin` grants it.
pub const USER: &str = "app_user";

/// The customer's two roles on a plain test server ([`Server`]: no pg_tle, no database
/// [`DATABASE`]), as the suites that compare the editions or attack the SQL edition make them:
/// [`ADMIN`] (LOGIN CREATEROLE, not a superuser) owns database `postgres` and its schema
/// `public`; [`USER`] is a login with no attribute.
pub fn app_roles(server: &Server) {
    server
        .client()
        .batch_execute(&format!(
            "CREATE ROLE {ADMIN} LOGIN CREATEROLE; CREATE ROLE {USER} LOGIN;
             ALTER DATABASE postgres OWNER TO {ADMIN};
             ALTER SCHEMA public OWNER TO {ADMIN};"
        ))
        .expect("roles");
}

/// A server with no pg_idem library ([`Server::start_bare`]) and the [`app_roles`], where
/// [`ADMIN`] ran the SQL edition's plain install ([`sql_edition`]) into database `postgres` in
/// one transaction, and so owns pg_idem: the SQL edition as a DBA installs it without pg_tle.
pub fn plain_server(conf: &[&str]) -> Server {
    let server = Server::start_bare(conf);
    app_roles(&server);
    server
        .client_as(ADMIN)
        .batch_execute(&format!("BEGIN;\n{}\nCOMMIT;", sql_edition().plain))
        .expect("plain install of the SQL edition");
    server
}

/// A running managed-style server; see the module documentation.
pub struct ManagedServer {
    dir: PathBuf,
    bindir: PathBuf,
    pub major: u32,
    pub port: u16,
}

/// The bin directory of the managed-style tree for `major`, made (or found ready) by
/// `scripts/lib/managed_pg.sh`; None (after [`skip_test`] with dependency `pg_tle`) when the
/// script exits 3: ../shared/pg_tle, which carries pg_tle's source, is not on this machine.
fn managed_bindir(major: u32) -> Option<PathBuf> {
    match managed_tree(major) {
        Ok(bindir) => Some(bindir),
        Err(missing) => {
            skip_test(
                "pg_tle",
                &format!(
                    "no managed-style PostgreSQL {major}: {missing} (pg_tle's source and \
                     installer belong in ../shared/pg_tle)"
                ),
            );
            None
        }
    }
}

/// Runs `scripts/lib/managed_pg.sh major`: the tree's bin directory, or Err with the script's
/// message when it exits 3 (pg_tle's source missing); panics on any other failure. Also for a
/// run whose every server is managed-style (`PG_IDEM_EDITION=sql-tle`).
pub(crate) fn managed_tree(major: u32) -> Result<PathBuf, String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/lib/managed_pg.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(major.to_string())
        .output()
        .unwrap_or_else(|e| panic!("{}: cannot run: {e}", script.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        return Err(stderr.trim().to_string());
    }
    assert!(
        out.status.success(),
        "scripts/lib/managed_pg.sh {major} failed: {}\n{}{stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bindir = PathBuf::from(
        stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("managed_pg.sh {major} printed no bin directory"))
            .trim(),
    );
    assert!(
        bindir.join("postgres").exists(),
        "managed_pg.sh {major} printed {}, which has no postgres",
        bindir.display()
    );
    Ok(bindir)
}

impl ManagedServer {
    /// Starts a managed-style PostgreSQL `major` and sets it up as RDS hands one over; None
    /// (after [`skip_test`] with dependency `pg_tle`) when the tree cannot be made because
    /// ../shared/pg_tle is missing. Panics on any other failure.
    pub fn start(major: u32) -> Option<ManagedServer> {
        let bindir = managed_bindir(major)?;
        std::fs::create_dir_all(ROOT).expect("create test root");
        let _ = Command::new("chmod").args(["1777", ROOT]).status();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(ROOT).join(format!("managed{major}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create server dir");
        let _ = Command::new("chmod").args(["777"]).arg(&dir).status();
        let mut server = ManagedServer {
            dir,
            bindir,
            major,
            port: 0,
        };
        // A fresh cluster, as `Server`'s template is made: trust authentication (the tests
        // connect over 127.0.0.1 without passwords; RDS uses passwords or IAM, which changes
        // nothing a test checks here), UTF8 and the C.UTF-8 locale, `postgres` the bootstrap
        // superuser.
        let mut initdb = initdb_command(&server.bindir);
        initdb.arg("-D").arg(server.dir.join("data"));
        run_ok(&mut initdb, "initdb (managed-style)");
        server.start_on_free_port();
        server.set_up();
        Some(server)
    }

    /// pg_tle must be preloaded: it installs hooks (CREATE/ALTER EXTENSION of a TLE, guarding
    /// its `pgtle` schema) at server start. On RDS, `shared_preload_libraries` is a parameter
    /// group setting the customer turns on before `CREATE EXTENSION pg_tle`.
    fn start_on_free_port(&mut self) {
        let mut last_error = String::new();
        for _ in 0..3 {
            self.port = free_port();
            self.write_conf(&[
                format!("port = {}", self.port),
                "listen_addresses = '127.0.0.1'".to_string(),
                format!("unix_socket_directories = '{}'", self.dir.display()),
                "shared_preload_libraries = 'pg_tle'".to_string(),
                "log_line_prefix = '%m [%p] %u@%d '".to_string(),
            ]);
            match self.pg_ctl(&["-w", "-t", "60", "start"]) {
                Ok(()) => return,
                Err(e) => last_error = e,
            }
        }
        panic!(
            "managed-style server did not start: {last_error}\n{}",
            self.log()
        );
    }

    /// What RDS's control plane and the customer's first session do, run as the bootstrap
    /// superuser; afterwards nothing in the tests needs a superuser.
    fn set_up(&self) {
        let mut postgres = self.superuser_client_db("postgres");
        // - app_admin: RDS's master user is a member of rds_superuser, which is not a
        //   superuser but has CREATEROLE (RDS also gives it CREATEDB; no test here needs one
        //   more database, so it is left out). `rolsuper` false is what makes every check of
        //   the SQL edition meaningful: what app_admin can do, a customer can do.
        // - app_user: an application's login, with no attributes; it gets only what app_admin
        //   grants it.
        // - database app: a database the customer made; its owner is app_admin, as RDS's
        //   master user owns the databases it creates (and on PostgreSQL 15+ the owner of a
        //   database owns its `public` schema, through pg_database_owner).
        postgres
            .batch_execute(&format!(
                "CREATE ROLE {ADMIN} LOGIN NOSUPERUSER CREATEROLE NOCREATEDB;
                 CREATE ROLE {USER} LOGIN NOSUPERUSER;"
            ))
            .expect("create the managed-style roles");
        // a statement of its own: CREATE DATABASE cannot run in a (multi-statement) transaction
        postgres
            .batch_execute(&format!("CREATE DATABASE {DATABASE} OWNER {ADMIN}"))
            .expect("create database app");
        drop(postgres);
        let mut app = self.superuser_client();
        // - CREATE EXTENSION pg_tle: pg_tle's control file has no `trusted`, so it needs a
        //   superuser; on RDS the master user may run it because RDS allows it for
        //   rds_superuser. It creates schema `pgtle` and role `pgtle_admin`.
        // - GRANT pgtle_admin: only its members (and superusers) may register TLEs
        //   (pgtle.install_extension and friends); on RDS, rds_superuser grants it to itself
        //   or to whom it chooses.
        // - GRANT CREATE ON SCHEMA public: PostgreSQL 15 took CREATE on public away from
        //   PUBLIC; app_admin has it through owning the database from 15 on, and this makes
        //   it explicit and the same on 14.
        app.batch_execute(&format!(
            "CREATE EXTENSION pg_tle;
             GRANT pgtle_admin TO {ADMIN};
             GRANT CREATE ON SCHEMA public TO {ADMIN};"
        ))
        .expect("set up pg_tle in database app");
    }

    /// Appends settings to postgresql.auto.conf (later lines win); apply with a restart.
    pub fn write_conf(&self, lines: &[String]) {
        let path = self.dir.join("data/postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&path, text).expect("write conf");
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let mut cmd = as_server_user(&self.bindir.join("pg_ctl"));
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

    /// Connection parameters for `role` on database `app`. A statement that hangs fails its
    /// test after a minute instead of hanging the suite.
    pub fn conninfo(&self, role: &str) -> String {
        self.conninfo_db(role, DATABASE)
    }

    fn conninfo_db(&self, role: &str, dbname: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={role} dbname={dbname} connect_timeout=10 options='-c statement_timeout=60s'",
            self.port
        )
    }

    /// A new connection as `role` (normally [`ADMIN`] or [`USER`]) to database `app`.
    pub fn client_as(&self, role: &str) -> Client {
        connect_seeded(&self.conninfo(role))
            .unwrap_or_else(|e| panic!("connect as {role} to {DATABASE}: {e}"))
    }

    /// A connection as the bootstrap superuser to database `app`: FOR SETUP AND INSPECTION
    /// ONLY. A managed service gives its customers no superuser, so a test that does what a
    /// customer does (install, upgrade, use the SQL edition) must use [`ADMIN`] or [`USER`];
    /// this is for what the service itself does, or for looking at the server from outside.
    pub fn superuser_client(&self) -> Client {
        self.superuser_client_db(DATABASE)
    }

    fn superuser_client_db(&self, dbname: &str) -> Client {
        connect_seeded(&self.conninfo_db("postgres", dbname))
            .unwrap_or_else(|e| panic!("connect as postgres to {dbname}: {e}"))
    }

    /// The bin directory of the managed-style tree this server runs from (pg_dump, psql, ...).
    pub fn bindir(&self) -> &Path {
        &self.bindir
    }

    /// The server's directory (data/, server.log, the unix socket).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Runs a program of the managed-style tree's bin directory (pg_dump, pg_restore, psql,
    /// ...) as the server's OS user.
    pub fn run_bin(&self, program: &str, args: &[&str]) -> Output {
        let mut cmd = as_server_user(&self.bindir.join(program));
        cmd.args(args);
        cmd.output().unwrap_or_else(|e| panic!("{program}: {e}"))
    }
}

impl Drop for ManagedServer {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
