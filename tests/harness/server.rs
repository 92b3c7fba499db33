//! A test server: started on a free port, stopped when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::*;

/// A running test server.
pub struct Server {
    pub(crate) dir: PathBuf,
    pub port: u16,
}

pub(crate) fn free_port() -> u16 {
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
            // purges at calls drawn from each session's random() (the same calls on every run:
            // connect_seeded), would purge what such a test expects to find, and is switched
            // off for it. Every other test runs with it on.
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

    pub(crate) fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
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

    pub fn conninfo_as(&self, role: &str, dbname: &str) -> String {
        conninfo_for(self.port, role, dbname)
    }

    /// A new connection as the bootstrap superuser `postgres` to database `dbname`: the
    /// service's side of a `sql-tle` run (RDS's `rdsadmin`, which customers never get), for
    /// setting a server up and for what only a superuser may look at; elsewhere the same role
    /// as [`Server::client`]'s.
    pub fn superuser_client_db(&self, dbname: &str) -> Client {
        connect_seeded(&self.conninfo_as("postgres", dbname))
            .unwrap_or_else(|e| panic!("connect to {dbname} as the superuser: {e}"))
    }

    /// A new connection to database `postgres` as the DBA ([`dba_role`]).
    pub fn client(&self) -> Client {
        self.client_db("postgres")
    }

    pub fn client_db(&self, dbname: &str) -> Client {
        connect_seeded(&self.conninfo(dbname))
            .unwrap_or_else(|e| panic!("connect to {dbname}: {e}"))
    }

    /// A new connection as `role`.
    pub fn client_as(&self, role: &str) -> Client {
        connect_seeded(&self.conninfo_as(role, "postgres"))
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
                client = connect_seeded(&self.conninfo("postgres"))
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
