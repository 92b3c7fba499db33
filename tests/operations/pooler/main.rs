//! pg_idem behind a transaction pooler: PgBouncer in `pool_mode = transaction` in front of a test
//! server, with fewer server connections than clients, so that consecutive transactions of one
//! client land on different backends and one backend serves many clients in turn.
//!
//! How the clients talk through it. PgBouncer 1.18 (Debian 12) cannot route protocol-level
//! prepared statements in transaction mode: a statement prepared on one backend is unknown on
//! the next. The `postgres` crate's `query`/`execute` with a string prepare a *named* statement
//! (Parse+Describe+Sync, then Bind+Execute+Sync), which works only while one transaction keeps
//! the client on one backend (`named_statements_need_a_transaction` shows both sides). So every
//! call here goes through `query_typed` (one unnamed Parse+Bind+Execute+Sync: the whole
//! statement reaches one backend in one piece) or the simple query protocol (`batch_execute`,
//! `simple_query`), inside and outside transactions alike (`transaction()` sends BEGIN and
//! COMMIT as simple queries); only the session-mode case uses `query`, which works there.
//!
//! Every case runs on the engine path and on the SPI path (a trigger on idem.keys, as
//! tests/attacks/security.rs and tests/behaviour/key_store.rs force it), and checks which path it
//! took.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use pg_idem_tests::*;
use postgres::types::{ToSql, Type};

/// Two tests of a case: on the engine path and on the SPI path.
macro_rules! on_both_paths {
    ($case:ident, $engine:ident, $spi:ident) => {
        #[test]
        fn $engine() {
            $case(Path::Engine)
        }
        #[test]
        fn $spi() {
            $case(Path::Spi)
        }
    };
}

mod backends;
mod contract;
mod roles;

// ---------------------------------------------------------------------------------------------
// A PgBouncer of the test's own
// ---------------------------------------------------------------------------------------------

const ROOT: &str = "/tmp/pg_idem_tests";
static BOUNCERS: AtomicUsize = AtomicUsize::new(0);

/// A PgBouncer in transaction mode on a free port of 127.0.0.1 (no Unix socket), run as the
/// server's OS user, in the foreground as a child of the test, with its own configuration: it
/// never touches Debian's pgbouncer service or its port 6432. Killed when dropped, panic or not.
///
/// Its databases, all pointing at the test server's database `postgres`:
/// - `postgres`: 2 server connections per user (`default_pool_size`)
/// - `single`: 1 server connection per user, for cases whose clients must share one backend
/// - `session`: 1 server connection per user in `pool_mode = session` (`server_reset_query`
///   DISCARD ALL when a client leaves)
struct Bouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn id_of(flag: &str) -> Option<u32> {
    let out = Command::new("id").args([flag, "postgres"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn pgbouncer_binary() -> PathBuf {
    for candidate in ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"] {
        if std::path::Path::new(candidate).exists() {
            return candidate.into();
        }
    }
    panic!("pgbouncer is not installed: run scripts/setup.sh (it installs Debian's pgbouncer)");
}

impl Bouncer {
    /// Users it lets in (trust; PgBouncer wants them listed in its auth_file all the same).
    fn start(server: &Server, users: &[&str]) -> Bouncer {
        let n = BOUNCERS.fetch_add(1, Ordering::Relaxed);
        let dir = PathBuf::from(ROOT).join(format!("pgbouncer-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create pgbouncer dir");
        let _ = Command::new("chmod").arg("777").arg(&dir).status();
        let userlist: String = [dba_role()]
            .iter()
            .chain(users)
            .map(|u| format!("\"{u}\" \"\"\n"))
            .collect();
        std::fs::write(dir.join("userlist.txt"), userlist).expect("write userlist");
        let mut last_log = String::new();
        for _ in 0..3 {
            let port = free_port();
            let ini = format!(
                "[databases]\n\
                 postgres = host=127.0.0.1 port={sp} dbname=postgres\n\
                 single = host=127.0.0.1 port={sp} dbname=postgres pool_size=1\n\
                 session = host=127.0.0.1 port={sp} dbname=postgres pool_size=1 pool_mode=session\n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 auth_type = trust\n\
                 auth_file = {dir}/userlist.txt\n\
                 pool_mode = transaction\n\
                 default_pool_size = 2\n\
                 max_client_conn = 200\n\
                 server_login_retry = 1\n\
                 query_wait_timeout = 60\n\
                 logfile = {dir}/pgbouncer.log\n",
                sp = server.port,
                dir = dir.display()
            );
            std::fs::write(dir.join("pgbouncer.ini"), ini).expect("write pgbouncer.ini");
            let mut cmd = Command::new(pgbouncer_binary());
            if running_as_root() {
                // it refuses to run as root; as the server's user, and still our own child
                use std::os::unix::process::CommandExt;
                cmd.uid(id_of("-u").expect("uid of postgres"))
                    .gid(id_of("-g").expect("gid of postgres"));
            }
            cmd.arg("-q")
                .arg(dir.join("pgbouncer.ini"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let mut child = cmd.spawn().expect("start pgbouncer");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // exited: the port was taken meanwhile, or a bad configuration
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Bouncer { child, dir, port };
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            last_log = std::fs::read_to_string(dir.join("pgbouncer.log")).unwrap_or_default();
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("pgbouncer did not start:\n{last_log}");
    }

    fn conninfo(&self, dbname: &str, user: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={user} dbname={dbname} connect_timeout=10",
            self.port
        )
    }

    /// A client of database `dbname` (`postgres`: 2 backends, `single`: 1) as `user`.
    fn connect(&self, dbname: &str, user: &str) -> Client {
        Client::connect(&self.conninfo(dbname, user), NoTls).unwrap_or_else(|e| {
            panic!(
                "connect to pgbouncer {dbname} as {user}: {e}\n{}",
                self.log()
            )
        })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------------------------
// A server with pg_idem and a bouncer in front of it
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    Engine,
    Spi,
}

/// The bouncer is declared first: it is dropped (killed) before the server stops.
struct Rig {
    bouncer: Bouncer,
    server: Server,
    path: Path,
}

impl Rig {
    /// A server with pg_idem preloaded, `public.effects` (the business table: one row per
    /// effect), on `path`, with `setup` run as the DBA ([`dba_role`]) before the bouncer opens any server
    /// connection (database settings reach every backend it opens).
    fn start(path: Path, setup: &str, users: &[&str]) -> Rig {
        let server = Server::start(&[]);
        let mut db = server.client();
        db.batch_execute(&format!(
            "CREATE TABLE public.effects (tenant text NOT NULL, key text NOT NULL, note text);
             GRANT ALL ON public.effects TO PUBLIC;
             CREATE TABLE public.spi_path (key text);
             GRANT INSERT ON public.spi_path TO {};
             ALTER DATABASE postgres SET statement_timeout = '60s';",
            pg_idem_owner()
        ))
        .expect("rig setup");
        if path == Path::Spi {
            // the engine does not fire triggers, so a trigger on idem.keys sends every write
            // through SQL statements (which fire it: public.spi_path proves the path taken)
            db.batch_execute(
                "CREATE FUNCTION public.keys_audit() RETURNS trigger LANGUAGE plpgsql AS
                   $$ BEGIN INSERT INTO public.spi_path VALUES (NEW.key); RETURN NEW; END $$;
                 CREATE TRIGGER audit BEFORE INSERT ON idem.keys
                   FOR EACH ROW EXECUTE FUNCTION public.keys_audit();",
            )
            .expect("force the SPI path");
        }
        if !setup.is_empty() {
            db.batch_execute(setup).expect("case setup");
        }
        let bouncer = Bouncer::start(&server, users);
        Rig {
            bouncer,
            server,
            path,
        }
    }

    fn pooled(&self) -> Client {
        self.bouncer.connect("postgres", dba_role())
    }

    /// Checks that the case's claims took the path it is about.
    fn assert_path(&self) {
        let audited = count(
            &mut self.server.client(),
            "SELECT count(*) FROM public.spi_path",
        );
        match self.path {
            Path::Engine => assert_eq!(audited, 0, "the engine path fires no trigger"),
            Path::Spi => assert!(audited > 0, "the SPI path's INSERT fired the trigger"),
        }
    }
}

fn count(db: &mut Client, sql: &str) -> i64 {
    db.query_typed(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))[0]
        .get(0)
}

// ---------------------------------------------------------------------------------------------
// Calls without named statements
// ---------------------------------------------------------------------------------------------

type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

/// A Client or a Transaction, through query_typed (unnamed statements) only.
trait Db {
    fn q(&mut self, sql: &str, params: &Params<'_>) -> Result<Vec<postgres::Row>, postgres::Error>;
}

impl Db for Client {
    fn q(&mut self, sql: &str, params: &Params<'_>) -> Result<Vec<postgres::Row>, postgres::Error> {
        self.query_typed(sql, params)
    }
}

impl Db for postgres::Transaction<'_> {
    fn q(&mut self, sql: &str, params: &Params<'_>) -> Result<Vec<postgres::Row>, postgres::Error> {
        self.query_typed(sql, params)
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Answer {
    outcome: String,
    fence: Option<i64>,
    attempt: Option<i32>,
    code: Option<i32>,
    body: Option<String>,
    /// the backend that answered
    pid: i32,
}

fn try_claim(
    db: &mut impl Db,
    tenant: &str,
    key: &str,
    hash: &str,
    lease: Option<&str>,
) -> Result<Answer, postgres::Error> {
    let rows = db.q(
        "SELECT c.outcome, c.fence, c.attempt, c.response_code, c.response_body::text, pg_backend_pid() \
           FROM idem_claim($1, $2, $3, $4::interval) AS c",
        &[
            (&tenant, Type::TEXT),
            (&key, Type::TEXT),
            (&hash, Type::TEXT),
            (&lease, Type::TEXT),
        ],
    )?;
    let r = &rows[0];
    Ok(Answer {
        outcome: r.get(0),
        fence: r.get(1),
        attempt: r.get(2),
        code: r.get(3),
        body: r.get(4),
        pid: r.get(5),
    })
}

fn claim(db: &mut impl Db, tenant: &str, key: &str, hash: &str) -> Answer {
    try_claim(db, tenant, key, hash, None).unwrap_or_else(|e| panic!("idem_claim {key}: {e:?}"))
}

fn claim_lease(db: &mut impl Db, tenant: &str, key: &str, lease: &str) -> Answer {
    try_claim(db, tenant, key, "h", Some(lease))
        .unwrap_or_else(|e| panic!("idem_claim {key}: {e:?}"))
}

fn try_complete(
    db: &mut impl Db,
    tenant: &str,
    key: &str,
    fence: i64,
    code: i32,
    body: &str,
) -> Result<(), postgres::Error> {
    db.q(
        "SELECT idem_complete($1, $2, $3, $4, $5::jsonb)",
        &[
            (&tenant, Type::TEXT),
            (&key, Type::TEXT),
            (&fence, Type::INT8),
            (&code, Type::INT4),
            (&body, Type::TEXT),
        ],
    )
    .map(|_| ())
}

fn complete(db: &mut impl Db, tenant: &str, key: &str, fence: i64, code: i32, body: &str) {
    try_complete(db, tenant, key, fence, code, body)
        .unwrap_or_else(|e| panic!("idem_complete {key}: {e}"))
}

fn effect(db: &mut impl Db, tenant: &str, key: &str, note: &str) {
    db.q(
        "INSERT INTO public.effects VALUES ($1, $2, $3)",
        &[
            (&tenant, Type::TEXT),
            (&key, Type::TEXT),
            (&note, Type::TEXT),
        ],
    )
    .unwrap_or_else(|e| panic!("business write {key}: {e}"));
}

fn effects(db: &mut impl Db, tenant: &str, key: &str) -> Vec<String> {
    db.q(
        "SELECT coalesce(note, '') FROM public.effects WHERE tenant = $1 AND key = $2 ORDER BY note",
        &[(&tenant, Type::TEXT), (&key, Type::TEXT)],
    )
    .expect("read effects")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn pid(db: &mut impl Db) -> i32 {
    db.q("SELECT pg_backend_pid()", &[])
        .expect("pg_backend_pid")[0]
        .get(0)
}

fn fence(a: &Answer) -> i64 {
    a.fence.unwrap_or_else(|| panic!("no fence in {a:?}"))
}

fn state_of(e: &postgres::Error) -> String {
    let state = sqlstate(e);
    assert!(!state.is_empty(), "not a server error: {e}");
    state
}

/// Holds one transaction open on a pooled client until `commit`: while it runs, the pool cannot
/// hand its backend to anyone else. Returns the backend's pid.
fn hold(db: &mut Client) -> i32 {
    db.batch_execute("BEGIN").expect("BEGIN");
    pid(db)
}

fn end(db: &mut Client) {
    db.batch_execute("COMMIT").expect("COMMIT");
}

/// Holds `other` in a transaction on backend `pid` (retrying until the pool hands it that one),
/// so that the next transaction of any other client lands on another backend.
fn occupy(other: &mut Client, pid: i32) {
    for _ in 0..20 {
        if hold(other) == pid {
            return;
        }
        end(other);
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the pool never handed out backend {pid}");
}
