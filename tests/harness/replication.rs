//! Streaming replication, and a server restarted with an environment of its own.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::*;

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
        succeeded("pg_basebackup", out);
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
