//! pg_upgrade from one PostgreSQL major version to another with pg_idem installed, preloaded and
//! holding keys in every state plus a backlog of expired keys its purge worker would delete.
//!
//! pg_upgrade starts the old and the new server in binary-upgrade mode (`postgres -b`). It reads
//! the old cluster's next transaction ID before it starts the old server and gives it to the new
//! cluster, so a transaction committed by the old server while pg_upgrade runs has its XID
//! reused by the new cluster: rows it deleted come back or vanish at random, and amcheck reports
//! `xmax ... equals or exceeds next valid transaction ID`. pg_idem's purge worker must therefore
//! not run in that mode, on either side. This test measures it: the old cluster's NextXID must not
//! move during the upgrade, every answer must be the same after it, the new cluster's own worker
//! must purge the backlog, and amcheck must find nothing.
//!
//! It needs two PostgreSQL installations with pg_idem installed into both
//! (`scripts/install.sh --debug --pg 14` and `--pg 18`), named by their bin directories:
//! `PG_IDEM_UPGRADE_OLD_BINDIR` and `PG_IDEM_UPGRADE_NEW_BINDIR`. Without them it is recorded
//! as skipped (`skip_test`; a failure with PG_IDEM_REQUIRE=pg_upgrade). It starts its own
//! servers (the harness's `Server` serves one installation).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use pg_idem_tests::{
    as_server_user, initdb_command, skip_test, sqlstate, succeeded, try_claim, wait_for, Claim,
    Client, Column, NoTls,
};

/// Expired keys left for the purge worker: a hundred purge transactions (batches of 1000) while
/// pg_upgrade runs the old server, as in the report this test reproduces.
const EXPIRED_KEYS: i64 = 100_000;
const TENANTS: [&str; 2] = ["acme", "globex"];
const COMPLETED: usize = 120;
const FAILED: usize = 40;
const BUSY: usize = 40;
const STALLED: usize = 10;
const STREAMS: usize = 8;
const DB: &str = "app";

fn output(cmd: &mut Command, what: &str) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = succeeded(what, output(cmd, what));
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The major version of the PostgreSQL in `bindir`.
fn major(bindir: &Path) -> u32 {
    let out = run_ok(
        Command::new(bindir.join("pg_config")).arg("--version"),
        "pg_config --version",
    );
    out.split_whitespace()
        .nth(1)
        .and_then(|v| {
            v.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("cannot read a version in {out:?}"))
}

fn assert_pg_idem_installed(bindir: &Path) {
    let share = run_ok(
        Command::new(bindir.join("pg_config")).arg("--sharedir"),
        "pg_config --sharedir",
    );
    let control = PathBuf::from(share.trim()).join("extension/pg_idem.control");
    assert!(
        control.exists(),
        "pg_idem is not installed into {} ({} is missing): run scripts/install.sh --debug --pg {}",
        bindir.display(),
        control.display(),
        major(bindir)
    );
}

/// One cluster of one installation: initdb'ed into `dir/data`, stopped and removed when dropped.
struct Cluster {
    bindir: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl Cluster {
    fn init(bindir: &Path, dir: PathBuf, conf: &[&str]) -> Cluster {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create cluster dir");
        let _ = Command::new("chmod").arg("777").arg(&dir).status();
        let mut initdb = initdb_command(bindir);
        // pg_upgrade needs both clusters alike; initdb enables checksums by default from 18 on
        if major(bindir) >= 18 {
            initdb.arg("--no-data-checksums");
        }
        initdb.arg("-D").arg(dir.join("data"));
        run_ok(&mut initdb, "initdb");
        let cluster = Cluster {
            bindir: bindir.to_path_buf(),
            dir,
            port: free_port(),
        };
        let mut lines = vec![
            format!("port = {}", cluster.port),
            "listen_addresses = '127.0.0.1'".to_string(),
            format!("unix_socket_directories = '{}'", cluster.dir.display()),
            "log_line_prefix = '%m [%p] %b '".to_string(),
        ];
        lines.extend(conf.iter().map(|s| s.to_string()));
        cluster.append_conf(&lines);
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Appends to postgresql.conf (later lines win).
    fn append_conf(&self, lines: &[String]) {
        let path = self.data().join("postgresql.conf");
        let mut conf = std::fs::read_to_string(&path).expect("read postgresql.conf");
        for line in lines {
            conf.push_str(line);
            conf.push('\n');
        }
        std::fs::write(&path, conf).expect("write postgresql.conf");
    }

    fn pg_ctl(&self, args: &[&str]) -> Output {
        let mut cmd = as_server_user(&self.bindir.join("pg_ctl"));
        cmd.arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.log_path())
            .args(args);
        output(&mut cmd, "pg_ctl")
    }

    fn start(&self) {
        let out = self.pg_ctl(&["-w", "-t", "120", "start"]);
        assert!(
            out.status.success(),
            "server did not start: {}\n{}",
            text(&out),
            self.log()
        );
    }

    fn stop(&self) {
        let out = self.pg_ctl(&["-m", "fast", "-w", "-t", "60", "stop"]);
        assert!(
            out.status.success(),
            "server did not stop: {}\n{}",
            text(&out),
            self.log()
        );
    }

    fn reload(&self) {
        let out = self.pg_ctl(&["reload"]);
        assert!(out.status.success(), "reload: {}", text(&out));
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn connect(&self, user: &str, dbname: &str) -> Client {
        let conninfo = format!(
            "host=127.0.0.1 port={} user={user} dbname={dbname} connect_timeout=10 options='-c statement_timeout=120s'",
            self.port
        );
        Client::connect(&conninfo, NoTls)
            .unwrap_or_else(|e| panic!("connect to {dbname} as {user}: {e:?}"))
    }

    fn client_as(&self, user: &str) -> Client {
        self.connect(user, DB)
    }

    fn client(&self) -> Client {
        self.client_as("postgres")
    }

    /// "Latest checkpoint's NextXID" of the stopped cluster, as pg_controldata prints it.
    fn next_xid(&self) -> String {
        let mut cmd = as_server_user(&self.bindir.join("pg_controldata"));
        cmd.arg(self.data());
        let out = run_ok(&mut cmd, "pg_controldata");
        out.lines()
            .find_map(|l| l.strip_prefix("Latest checkpoint's NextXID:"))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no NextXID in pg_controldata's output:\n{out}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn hash(i: usize) -> String {
    format!("request-{i}")
}

fn tenant(i: usize) -> &'static str {
    TENANTS[i % TENANTS.len()]
}

/// Fills the old cluster: keys in every state, each business write in its key's transaction,
/// stream watermarks, tenant grants, and EXPIRED_KEYS expired keys. Returns the fences of the
/// keys in progress, by index (busy-i, stalled-i).
fn fill(db: &mut Client) -> (Vec<i64>, Vec<i64>) {
    db.batch_execute(
        "CREATE EXTENSION pg_idem; \
         CREATE TABLE payments (tenant text, key text, amount int NOT NULL, PRIMARY KEY (tenant, key)); \
         CREATE ROLE svc_acme LOGIN; CREATE ROLE svc_globex LOGIN; \
         SELECT idem_grant_tenant('svc_acme', 'acme'); \
         SELECT idem_grant_tenant('svc_globex', 'globex');",
    )
    .expect("schema, roles and grants");
    for i in 0..COMPLETED {
        let key = format!("done-{i}");
        let mut tx = db.transaction().unwrap();
        let c = try_claim(&mut tx, tenant(i), &key, &hash(i), None, None).expect("claim");
        assert_eq!(c.outcome, "claimed");
        tx.execute(
            "INSERT INTO payments VALUES ($1, $2, $3)",
            &[&tenant(i), &key, &(i as i32 * 100)],
        )
        .unwrap();
        tx.query_one(
            "SELECT idem_complete($1, $2, $3, 201, jsonb_build_object('payment', $4::int, 'note', repeat('x', $4::int)))",
            &[&tenant(i), &key, &c.fence.unwrap(), &(i as i32)],
        )
        .expect("idem_complete");
        tx.commit().unwrap();
    }
    for i in 0..FAILED {
        let key = format!("failed-{i}");
        let c = try_claim(db, tenant(i), &key, &hash(i), None, None).expect("claim");
        db.query_one(
            "SELECT idem_fail_final($1, $2, $3, 402, jsonb_build_object('error', 'declined', 'n', $4::int))",
            &[&tenant(i), &key, &c.fence.unwrap(), &(i as i32)],
        )
        .expect("idem_fail_final");
    }
    // in progress under a live lease; every other one with a checkpoint
    let mut busy = Vec::new();
    for i in 0..BUSY {
        let key = format!("busy-{i}");
        let c = try_claim(db, tenant(i), &key, &hash(i), Some("1 day"), None).expect("claim");
        let fence = c.fence.unwrap();
        if i % 2 == 0 {
            db.query_one(
                "SELECT idem_checkpoint($1, $2, $3, 'charged', jsonb_build_object('charge', $4::int))",
                &[&tenant(i), &key, &fence, &(i as i32)],
            )
            .expect("idem_checkpoint");
        }
        busy.push(fence);
    }
    // in progress, the lease passed (the key is taken over, with its checkpoint, by the next claim)
    let mut stalled = Vec::new();
    for i in 0..STALLED {
        let key = format!("stalled-{i}");
        let c = try_claim(db, tenant(i), &key, &hash(i), Some("1 ms"), None).expect("claim");
        let fence = c.fence.unwrap();
        db.query_one(
            "SELECT idem_checkpoint($1, $2, $3, 'step-2', jsonb_build_object('stalled', $4::int))",
            &[&tenant(i), &key, &fence, &(i as i32)],
        )
        .expect("idem_checkpoint");
        stalled.push(fence);
    }
    for s in 0..STREAMS {
        let stream = format!("partition-{s}");
        for seq in [1i64, 2, 5, (s as i64 + 1) * 1000 + 7] {
            db.query_one(
                "SELECT outcome FROM idem_claim_seq($1, $2, $3)",
                &[&tenant(s), &stream, &seq],
            )
            .expect("idem_claim_seq");
        }
    }
    // expired keys through the API, in batches of 1000 claims per statement: half completed
    // (a lease long enough to complete them, then the ttl of 1 ms), half left in progress with
    // a lease of 1 ms
    for start in (1..=EXPIRED_KEYS).step_by(1000) {
        let end = (start + 999).min(EXPIRED_KEYS);
        let completed: i64 = db
            .query_one(
                "SELECT count(*) FROM generate_series($1::bigint, $2::bigint, 2) AS g, \
                   LATERAL idem_claim('bulk', 'expired-done-' || g, 'h', '30 s', '1 ms') AS c, \
                   LATERAL idem_complete('bulk', 'expired-done-' || g, c.fence, 200, '{\"bulk\": true}') AS d",
                &[&start, &end],
            )
            .expect("expired completed keys")
            .get(0);
        let claimed: i64 = db
            .query_one(
                "SELECT count(*) FROM generate_series($1::bigint, $2::bigint, 2) AS g, \
                   LATERAL idem_claim('bulk', 'expired-busy-' || g, 'h', '1 ms', '1 ms') AS c \
                  WHERE c.outcome = 'claimed'",
                &[&(start + 1), &end],
            )
            .expect("expired keys in progress")
            .get(0);
        assert_eq!(completed + claimed, end - start + 1);
    }
    db.batch_execute("ALTER DATABASE app SET pg_idem.tenant_grants = on")
        .unwrap();
    (busy, stalled)
}

/// Expired keys in idem.keys (the purge's own condition), and all of tenant 'bulk'.
fn count_expired(db: &mut Client) -> (i64, i64) {
    let row = db
        .query_one(
            "SELECT count(*) FILTER (WHERE expires_at < clock_timestamp() \
                                       AND (lease_expires_at IS NULL OR lease_expires_at < clock_timestamp())), \
                    count(*) FILTER (WHERE tenant = 'bulk') FROM idem.keys",
            &[],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

fn describe(c: &Result<Claim, postgres::Error>) -> String {
    match c {
        Ok(c) => format!("{c:?}"),
        Err(e) => format!("error {}", sqlstate(e)),
    }
}

/// Everything a client can observe of the store without changing it, one line each: replays,
/// mismatches, in_progress answers, fences (checked, then rolled back), watermarks, grants and
/// what they allow, the rows of every pg_idem table but the expired keys, the business rows.
fn answers(cluster: &Cluster, busy: &[i64]) -> Vec<String> {
    let mut db = cluster.client();
    let mut out = Vec::new();
    for i in 0..COMPLETED {
        let key = format!("done-{i}");
        let replay = try_claim(&mut db, tenant(i), &key, &hash(i), None, None);
        let mismatch = try_claim(&mut db, tenant(i), &key, "another request", None, None);
        out.push(format!(
            "{key}: {} / {}",
            describe(&replay),
            describe(&mismatch)
        ));
    }
    for i in 0..FAILED {
        let key = format!("failed-{i}");
        let replay = try_claim(&mut db, tenant(i), &key, &hash(i), None, None);
        out.push(format!("{key}: {}", describe(&replay)));
    }
    for (i, fence) in busy.iter().enumerate() {
        let key = format!("busy-{i}");
        let answer = try_claim(&mut db, tenant(i), &key, &hash(i), None, None);
        let mut fenced = |f: i64| {
            let mut tx = db.transaction().unwrap();
            let r = tx
                .execute(
                    "SELECT idem_assert_fence($1, $2, $3)",
                    &[&tenant(i), &key, &f],
                )
                .map(|_| "ok".to_string())
                .unwrap_or_else(|e| format!("error {}", sqlstate(&e)));
            let _ = tx.rollback();
            r
        };
        let (right, wrong) = (fenced(*fence), fenced(fence + 1));
        out.push(format!(
            "{key}: {} / its fence: {right} / another fence: {wrong}",
            describe(&answer)
        ));
    }
    for s in 0..STREAMS {
        let stream = format!("partition-{s}");
        let w: Option<i64> = db
            .query_one("SELECT idem_watermark($1, $2)", &[&tenant(s), &stream])
            .unwrap()
            .get(0);
        out.push(format!("watermark {stream}: {w:?}"));
    }
    // tenant grants, as the granted roles see them (tried in a transaction rolled back)
    for role in ["svc_acme", "svc_globex"] {
        let mut as_role = cluster.client_as(role);
        for t in TENANTS {
            let mut tx = as_role.transaction().unwrap();
            // the outcome only: a fresh claim's fence is new each time
            let r = try_claim(&mut tx, t, "grant-probe", "h", None, None)
                .map(|c| c.outcome)
                .unwrap_or_else(|e| format!("error {}", sqlstate(&e)));
            let _ = tx.rollback();
            out.push(format!("{role} claims on {t}: {r}"));
        }
    }
    for (what, sql) in [
        (
            "key",
            "SELECT k::text FROM idem.keys AS k WHERE tenant <> 'bulk' ORDER BY tenant, key",
        ),
        (
            "watermark row",
            "SELECT w::text FROM idem.watermarks AS w ORDER BY tenant, stream",
        ),
        (
            "grant",
            "SELECT g::text FROM idem_tenant_grants() AS g ORDER BY 1",
        ),
        (
            "payment",
            "SELECT p::text FROM payments AS p ORDER BY tenant, key",
        ),
    ] {
        for row in db.query(sql, &[]).unwrap() {
            out.push(format!("{what}: {}", row.get::<_, String>(0)));
        }
    }
    out
}

fn max_fence(db: &mut Client) -> i64 {
    db.query_one("SELECT max(fence) FROM idem.keys", &[])
        .unwrap()
        .get(0)
}

/// amcheck on every table of schema idem: `verify_heapam` of the heap and its TOAST, and
/// `bt_index_parent_check(heapallindexed)` of every index (each entry in place, every heap tuple
/// indexed). Panics with what it found.
fn amcheck(db: &mut Client, when: &str) {
    db.batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        .expect("CREATE EXTENSION amcheck");
    let tables: Vec<String> = db
        .column("SELECT c.oid::regclass::text FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace \
              WHERE n.nspname = 'idem' AND c.relkind = 'r' ORDER BY 1",
            &[],);
    assert!(
        tables.iter().any(|t| t == "idem.keys"),
        "no idem.keys among {tables:?}"
    );
    let mut found = Vec::new();
    for table in &tables {
        for row in db
            .query(
                "SELECT format('block %s, offset %s, attribute %s: %s', v.blkno, v.offnum, v.attnum, v.msg) \
                   FROM verify_heapam($1::text::regclass, check_toast => true) AS v",
                &[table],
            )
            .unwrap_or_else(|e| panic!("verify_heapam({table}): {e}"))
        {
            found.push(format!("verify_heapam({table}): {}", row.get::<_, String>(0)));
        }
        let indexes: Vec<String> = db
            .column("SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = $1::text::regclass ORDER BY 1",
                &[table],);
        for index in indexes {
            if let Err(e) = db.execute(
                "SELECT bt_index_parent_check($1::text::regclass, heapallindexed => true)",
                &[&index],
            ) {
                found.push(format!("bt_index_parent_check({index}): {e}"));
            }
        }
    }
    let shown: Vec<&String> = found.iter().take(20).collect();
    assert!(
        found.is_empty(),
        "amcheck {when}: {} problems, the first ones:\n{shown:#?}",
        found.len()
    );
}

/// The logs pg_upgrade kept (with --retain) under the new data directory: the servers' log
/// (`pg_upgrade_server.log`) and all of them, each with its name, for a failure's message.
fn pg_upgrade_logs(new_data: &Path) -> (String, String) {
    fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, files);
            } else {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&new_data.join("pg_upgrade_output.d"), &mut files);
    files.sort();
    let (mut servers, mut all) = (String::new(), String::new());
    for file in files {
        let content = std::fs::read_to_string(&file).unwrap_or_default();
        if file
            .file_name()
            .is_some_and(|n| n == "pg_upgrade_server.log")
        {
            servers.push_str(&content);
        }
        all.push_str(&format!("==> {} <==\n{content}\n", file.display()));
    }
    (servers, all)
}

/// Removes the test's directory at the end, whatever happened (the clusters, dropped before it,
/// stop their servers first).
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn pg_upgrade_keeps_every_key_and_runs_no_purge_in_binary_upgrade_mode() {
    let (Ok(old_bindir), Ok(new_bindir)) = (
        std::env::var("PG_IDEM_UPGRADE_OLD_BINDIR"),
        std::env::var("PG_IDEM_UPGRADE_NEW_BINDIR"),
    ) else {
        skip_test(
            "pg_upgrade",
            "set PG_IDEM_UPGRADE_OLD_BINDIR and PG_IDEM_UPGRADE_NEW_BINDIR to the bin \
             directories of two PostgreSQL installations with pg_idem installed (for example \
             $(pg_bindir 14) and $(pg_bindir 18) from scripts/lib/versions.sh) to run this test",
        );
        return;
    };
    let (old_bindir, new_bindir) = (PathBuf::from(old_bindir), PathBuf::from(new_bindir));
    assert_pg_idem_installed(&old_bindir);
    assert_pg_idem_installed(&new_bindir);
    let (old_major, new_major) = (major(&old_bindir), major(&new_bindir));
    eprintln!("upgrading PostgreSQL {old_major} -> {new_major}");

    let root = PathBuf::from("/tmp/pg_idem_tests");
    std::fs::create_dir_all(&root).expect("create test root");
    let _ = Command::new("chmod").arg("1777").arg(&root).status();
    let base = root.join(format!("pg_upgrade-{}", std::process::id()));
    let _remove_base = RemoveDir(base.clone());
    let preload = [
        "shared_preload_libraries = 'pg_idem'",
        "pg_idem.database = 'app'",
    ];
    // the worker is paused while the old cluster is filled
    let old = Cluster::init(
        &old_bindir,
        base.join("old"),
        &[&preload[..], &["pg_idem.purge_interval = 0"]].concat(),
    );
    old.start();
    old.connect("postgres", "postgres")
        .batch_execute("CREATE DATABASE app")
        .expect("CREATE DATABASE app");
    let mut db = old.client();
    let started = Instant::now();
    let (busy, stalled) = fill(&mut db);
    eprintln!("filled the old cluster in {:?}", started.elapsed());
    // every bulk key past its ttl and lease (the longest: 1 ms after its completion)
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        count_expired(&mut db),
        (EXPIRED_KEYS, EXPIRED_KEYS),
        "the expired keys before the upgrade (the worker is paused)"
    );
    let before = answers(&old, &busy);
    let old_max_fence = max_fence(&mut db);
    drop(db);
    old.stop();
    // the worker would purge at once from the next start on
    old.append_conf(&["pg_idem.purge_interval = '100ms'".to_string()]);
    let next_xid_before = old.next_xid();

    // the new cluster, configured as the old one (the worker enabled)
    let new = Cluster::init(
        &new_bindir,
        base.join("new"),
        &[&preload[..], &["pg_idem.purge_interval = '100ms'"]].concat(),
    );
    let work = base.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let _ = Command::new("chmod").arg("777").arg(&work).status();
    let (old_port, new_port) = (free_port().to_string(), free_port().to_string());
    let mut upgrade = as_server_user(&new_bindir.join("pg_upgrade"));
    upgrade
        .current_dir(&work)
        .arg("--old-bindir")
        .arg(&old_bindir)
        .arg("--new-bindir")
        .arg(&new_bindir)
        .arg("--old-datadir")
        .arg(old.data())
        .arg("--new-datadir")
        .arg(new.data())
        .args(["--old-port", &old_port, "--new-port", &new_port])
        .args(["--username", "postgres", "--retain"]);
    let started = Instant::now();
    let out = output(&mut upgrade, "pg_upgrade");
    let (server_logs, all_logs) = pg_upgrade_logs(&new.data());
    assert!(
        out.status.success(),
        "pg_upgrade failed: {}\n{}\nits logs:\n{all_logs}",
        out.status,
        text(&out)
    );
    eprintln!("pg_upgrade took {:?}", started.elapsed());

    // 1. pg_upgrade handed the new cluster the old NextXID it read first: the old server must
    //    not have committed anything since (copy mode leaves the old cluster as it was)
    let next_xid_after = old.next_xid();
    eprintln!("old cluster's NextXID: {next_xid_before} before pg_upgrade, {next_xid_after} after");
    assert_eq!(
        next_xid_after, next_xid_before,
        "the old cluster's NextXID moved while pg_upgrade ran: transactions committed there reuse \
         XIDs in the new cluster\nservers' log:\n{server_logs}"
    );

    // 2. the new cluster, its worker paused at first: nothing was deleted during the upgrade
    new.append_conf(&["pg_idem.purge_interval = 0".to_string()]);
    new.start();
    let mut db = new.client();
    assert_eq!(
        count_expired(&mut db),
        (EXPIRED_KEYS, EXPIRED_KEYS),
        "the expired keys right after the upgrade"
    );
    amcheck(&mut db, "right after the upgrade");
    let after = answers(&new, &busy);
    let differences: Vec<String> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(b, a)| format!("before: {b}\nafter:  {a}"))
        .take(20)
        .collect();
    assert!(
        differences.is_empty() && before.len() == after.len(),
        "answers changed across the upgrade ({} lines before, {} after):\n{}",
        before.len(),
        after.len(),
        differences.join("\n")
    );
    eprintln!("{} answers the same before and after", before.len());

    // 3. fences keep growing, fenced writes work, lapsed leases are taken over with their
    //    checkpoint, new watermarks move on from the old ones
    let c = try_claim(&mut db, "acme", "after-upgrade", "h", None, None).unwrap();
    assert_eq!(c.outcome, "claimed");
    assert!(
        c.fence.unwrap() > old_max_fence,
        "a new fence {:?} is not above every old one ({old_max_fence})",
        c.fence
    );
    for (i, old_fence) in stalled.iter().enumerate() {
        let key = format!("stalled-{i}");
        let c = try_claim(&mut db, tenant(i), &key, &hash(i), None, None).unwrap();
        assert_eq!(
            (c.outcome.as_str(), c.attempt, c.checkpoint_phase.as_deref()),
            ("claimed", Some(2), Some("step-2")),
            "{key}: {c:?}"
        );
        assert_eq!(
            c.checkpoint_data.as_deref(),
            Some(format!("{{\"stalled\": {i}}}").as_str())
        );
        assert!(
            c.fence.unwrap() > old_max_fence,
            "{key}: {c:?} after {old_fence}"
        );
    }
    db.query_one(
        "SELECT idem_complete($1, 'busy-1', $2, 200, '{\"finished\": \"after the upgrade\"}')",
        &[&tenant(1), &busy[1]],
    )
    .expect("complete a key claimed before the upgrade with its old fence");
    let replay = try_claim(&mut db, tenant(1), "busy-1", &hash(1), None, None).unwrap();
    assert_eq!(
        (replay.outcome.as_str(), replay.response_code),
        ("completed", Some(200))
    );
    let seq: (String, i64) = db
        .query_one(
            "SELECT outcome, watermark FROM idem_claim_seq('acme', 'partition-0', 1008)",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(seq, ("new".to_string(), 1008));

    // 4. the new cluster's own worker purges the backlog
    new.append_conf(&["pg_idem.purge_interval = '100ms'".to_string()]);
    new.reload();
    wait_for(
        "the purge worker of the new cluster to delete the expired keys",
        Duration::from_secs(60),
        || count_expired(&mut db) == (0, 0),
    );
    // the worker records a pass in idem_purge_status() once the pass is over, a moment after
    // its last batch committed
    let mut purged = 0i64;
    wait_for(
        "idem_purge_status() to show the new cluster's pass",
        Duration::from_secs(30),
        || {
            purged = db
                .query_one("SELECT total_keys FROM idem_purge_status()", &[])
                .unwrap()
                .get(0);
            purged >= EXPIRED_KEYS
        },
    );
    assert_eq!(purged, EXPIRED_KEYS, "keys the new cluster's worker purged");
    amcheck(&mut db, "after the purge on the new cluster");
    drop(db);

    // 5. what the servers said in binary-upgrade mode: the old one and the new one each started
    //    without the launcher, and no pg_idem process ran there
    let said = server_logs
        .matches("not starting the purge launcher: the server runs in binary-upgrade mode")
        .count();
    assert!(
        said >= 2,
        "pg_idem should say on each server pg_upgrade started that it starts no purge launcher \
         (said {said} times):\n{server_logs}"
    );
    for needle in ["pg_idem launcher", "pg_idem purge worker", "PANIC", "XX000"] {
        assert!(
            !server_logs.contains(needle),
            "{needle:?} in the log of the servers pg_upgrade ran:\n{server_logs}"
        );
    }
    let log = new.log();
    assert!(!log.contains("PANIC") && !log.contains("XX000"), "{log}");
}
