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
//! tests/security.rs and tests/key_store.rs force it), and checks which path it took.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use pg_idem_tests::*;
use postgres::types::{ToSql, Type};

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

// ---------------------------------------------------------------------------------------------
// The core behaviour
// ---------------------------------------------------------------------------------------------

fn core(path: Path) {
    let rig = Rig::start(path, "", &[]);
    let mut a = rig.pooled();
    let mut b = rig.pooled();
    let mut direct = rig.server.client();
    let t = "core";

    // claim, business write and complete in one transaction; then the replay, from another
    // client and so another backend's transaction
    let mut tx = a.transaction().unwrap();
    let c = claim(&mut tx, t, "k1", "h1");
    assert_eq!((c.outcome.as_str(), c.attempt), ("claimed", Some(1)));
    effect(&mut tx, t, "k1", "paid");
    complete(&mut tx, t, "k1", fence(&c), 201, r#"{"payment": 7}"#);
    tx.commit().unwrap();
    for db in [&mut a, &mut b] {
        let r = claim(db, t, "k1", "h1");
        assert_eq!(r.outcome, "completed");
        assert_eq!(r.code, Some(201));
        assert_eq!(r.body.as_deref(), Some(r#"{"payment": 7}"#));
        assert_eq!(r.fence, None);
    }
    // mismatch: the same key, another request
    let m = claim(&mut b, t, "k1", "other");
    assert_eq!((m.outcome.as_str(), m.body), ("mismatch", None));
    assert_eq!(effects(&mut direct, t, "k1"), ["paid"]);

    // in_progress answered without waiting while a transaction on the other backend holds
    // the claim; a rollback leaves nothing, so the next claim is a fresh one
    let holder = hold(&mut a);
    let c = claim(&mut a, t, "k2", "h");
    assert_eq!(c.outcome, "claimed");
    effect(&mut a, t, "k2", "rolled back");
    let started = Instant::now();
    let other = claim(&mut b, t, "k2", "h");
    assert_eq!(other.outcome, "in_progress");
    assert_ne!(
        other.pid, holder,
        "two transactions at once are on two backends"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "in_progress took {:?}",
        started.elapsed()
    );
    a.batch_execute("ROLLBACK").unwrap();
    let again = claim(&mut b, t, "k2", "h");
    assert_eq!(
        (again.outcome.as_str(), again.attempt),
        ("claimed", Some(1))
    );
    assert!(effects(&mut direct, t, "k2").is_empty());

    // fail: replayed as failed
    let c = claim(&mut a, t, "k3", "h");
    b.query_typed(
        "SELECT idem_fail_final($1, $2, $3, $4, $5::jsonb)",
        &[
            (&t, Type::TEXT),
            (&"k3", Type::TEXT),
            (&fence(&c), Type::INT8),
            (&502, Type::INT4),
            (&r#"{"error": "upstream"}"#, Type::TEXT),
        ],
    )
    .unwrap();
    let r = claim(&mut a, t, "k3", "h");
    assert_eq!(
        (r.outcome.as_str(), r.code, r.body.as_deref()),
        ("failed", Some(502), Some(r#"{"error": "upstream"}"#))
    );

    // release: a committed claim given back; the retry claims it afresh
    let c = claim(&mut a, t, "k4", "h");
    b.query_typed(
        "SELECT idem_release($1, $2, $3)",
        &[
            (&t, Type::TEXT),
            (&"k4", Type::TEXT),
            (&fence(&c), Type::INT8),
        ],
    )
    .unwrap();
    assert_eq!(claim(&mut b, t, "k4", "h").outcome, "claimed");

    // a lease takeover, then the stale fence refused with the business write of its transaction
    let old = claim_lease(&mut a, t, "k5", "200 ms");
    std::thread::sleep(Duration::from_millis(300));
    let new = claim_lease(&mut b, t, "k5", "1 min");
    assert_eq!((new.outcome.as_str(), new.attempt), ("claimed", Some(2)));
    assert!(fence(&new) > fence(&old));
    let mut tx = a.transaction().unwrap();
    effect(&mut tx, t, "k5", "stale worker");
    let err = try_complete(&mut tx, t, "k5", fence(&old), 200, "{}").unwrap_err();
    assert_eq!(state_of(&err), "55000");
    drop(tx); // ROLLBACK
    let mut tx = b.transaction().unwrap();
    effect(&mut tx, t, "k5", "new worker");
    complete(&mut tx, t, "k5", fence(&new), 200, r#"{"by": "new"}"#);
    tx.commit().unwrap();
    assert_eq!(effects(&mut direct, t, "k5"), ["new worker"]);
    assert_eq!(
        claim(&mut a, t, "k5", "h").body.as_deref(),
        Some(r#"{"by": "new"}"#)
    );

    // idem_consume and idem_consume_many
    let consume = |db: &mut Client, key: &str| -> bool {
        db.query_typed(
            "SELECT idem_consume($1, $2)",
            &[(&t, Type::TEXT), (&key, Type::TEXT)],
        )
        .unwrap()[0]
            .get(0)
    };
    assert!(consume(&mut a, "m1"));
    assert!(!consume(&mut b, "m1"));
    assert!(!consume(&mut a, "m1"));
    let keys = vec!["m1", "m2", "m3", "m2"];
    let fresh: Vec<String> = b
        .query_typed(
            "SELECT k FROM idem_consume_many($1, $2) AS k",
            &[(&t, Type::TEXT), (&keys, Type::TEXT_ARRAY)],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(fresh, ["m2", "m3"]);
    let fresh_again = a
        .query_typed(
            "SELECT k FROM idem_consume_many($1, $2) AS k",
            &[(&t, Type::TEXT), (&keys, Type::TEXT_ARRAY)],
        )
        .unwrap();
    assert!(fresh_again.is_empty());

    // a batch: idem_claim_many and idem_complete_many in one transaction, replayed after
    let keys = vec!["b1", "b2", "b1"];
    let hashes = vec!["h", "h", "h"];
    let claim_many = |db: &mut dyn FnMut(&str, &Params<'_>) -> Vec<postgres::Row>| {
        db(
            "SELECT m.key, m.outcome, m.fence, m.response_code FROM idem_claim_many($1, $2, $3) AS m",
            &[
                (&t, Type::TEXT),
                (&keys, Type::TEXT_ARRAY),
                (&hashes, Type::TEXT_ARRAY),
            ],
        )
        .iter()
        .map(|r| {
            (
                r.get::<_, String>(0),
                r.get::<_, String>(1),
                r.get::<_, Option<i64>>(2),
                r.get::<_, Option<i32>>(3),
            )
        })
        .collect::<Vec<_>>()
    };
    let mut tx = a.transaction().unwrap();
    let rows = claim_many(&mut |sql, p| tx.query_typed(sql, p).unwrap());
    let outcomes: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(outcomes, ["claimed", "claimed", "in_progress"]);
    let done_keys = vec!["b1", "b2"];
    let fences: Vec<i64> = rows[..2].iter().map(|r| r.2.unwrap()).collect();
    let codes = vec![200, 201];
    effect(&mut tx, t, "b1", "batch");
    effect(&mut tx, t, "b2", "batch");
    let completed = tx
        .query_typed(
            "SELECT count(*) FROM idem_complete_many($1, $2, $3, $4)",
            &[
                (&t, Type::TEXT),
                (&done_keys, Type::TEXT_ARRAY),
                (&fences, Type::INT8_ARRAY),
                (&codes, Type::INT4_ARRAY),
            ],
        )
        .unwrap()[0]
        .get::<_, i64>(0);
    assert_eq!(completed, 2);
    tx.commit().unwrap();
    let rows = claim_many(&mut |sql, p| b.query_typed(sql, p).unwrap());
    let answers: Vec<(&str, Option<i32>)> = rows.iter().map(|r| (r.1.as_str(), r.3)).collect();
    assert_eq!(
        answers,
        [
            ("completed", Some(200)),
            ("completed", Some(201)),
            ("completed", Some(200))
        ]
    );
    assert_eq!(effects(&mut direct, t, "b1"), ["batch"]);
    rig.assert_path();
}

// ---------------------------------------------------------------------------------------------
// Many clients, two server connections
// ---------------------------------------------------------------------------------------------

const CLIENTS: usize = 16;
const CROWD_KEYS: usize = 24;

fn crowd(path: Path) {
    let rig = Rig::start(path, "", &[]);
    let t = "crowd";
    let start = Arc::new(Barrier::new(CLIENTS));
    // (key, outcome, body) of every final answer, and every backend seen
    let answers = Arc::new(Mutex::new(Vec::<(String, String, Option<String>)>::new()));
    let pids = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let in_progress = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for client in 0..CLIENTS {
            let (start, answers, pids, in_progress) = (
                start.clone(),
                answers.clone(),
                pids.clone(),
                in_progress.clone(),
            );
            let mut db = rig.pooled();
            s.spawn(move || {
                start.wait();
                for i in 0..CROWD_KEYS {
                    // every client asks for every key in the same order, so that the two
                    // transactions running at any moment often claim the same one
                    let key = format!("key-{}", (i + client % 2) % CROWD_KEYS);
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        let mut tx = db.transaction().expect("BEGIN");
                        let c = claim(&mut tx, t, &key, "h");
                        pids.lock().unwrap().insert(c.pid);
                        match c.outcome.as_str() {
                            "claimed" => {
                                effect(&mut tx, t, &key, &format!("client {client}"));
                                // hold the backend a little: the others meet the claim
                                std::thread::sleep(Duration::from_millis(5));
                                let body = format!(r#"{{"by": {client}, "key": "{key}"}}"#);
                                complete(&mut tx, t, &key, fence(&c), 201, &body);
                                tx.commit().expect("COMMIT");
                            }
                            "completed" => tx.commit().expect("COMMIT"),
                            "in_progress" => {
                                in_progress.fetch_add(1, Ordering::Relaxed);
                                drop(tx);
                                assert!(Instant::now() < deadline, "{key} stayed in progress");
                                std::thread::sleep(Duration::from_millis(3));
                                continue;
                            }
                            other => panic!("{key}: unexpected {other}: {c:?}"),
                        }
                        answers.lock().unwrap().push((key, c.outcome, c.body));
                        break;
                    }
                }
            });
        }
    });
    let mut direct = rig.server.client();
    let answers = answers.lock().unwrap();
    assert_eq!(answers.len(), CLIENTS * CROWD_KEYS);
    for k in 0..CROWD_KEYS {
        let key = format!("key-{k}");
        let done = effects(&mut direct, t, &key);
        assert_eq!(done.len(), 1, "{key}: effects {done:?}");
        let stored: String = direct
            .query_typed(
                "SELECT response_body::text FROM idem_claim($1, $2, 'h')",
                &[(&t, Type::TEXT), (&key.as_str(), Type::TEXT)],
            )
            .unwrap()[0]
            .get(0);
        assert!(stored.contains(&format!("\"by\": {}", &done[0]["client ".len()..])));
        let mine: Vec<_> = answers.iter().filter(|a| a.0 == key).collect();
        assert_eq!(mine.len(), CLIENTS);
        assert_eq!(mine.iter().filter(|a| a.1 == "claimed").count(), 1);
        for replay in mine.iter().filter(|a| a.1 == "completed") {
            assert_eq!(replay.2.as_deref(), Some(stored.as_str()), "{key}");
        }
    }
    let pids = pids.lock().unwrap();
    assert_eq!(pids.len(), 2, "16 clients shared 2 backends: {pids:?}");
    assert!(
        in_progress.load(Ordering::Relaxed) > 0,
        "no claim met another in flight: the case proved nothing about duplicates"
    );
    println!(
        "{path:?}: {} requests over backends {pids:?}, {} in_progress answers",
        answers.len(),
        in_progress.load(Ordering::Relaxed)
    );
    rig.assert_path();
}

// ---------------------------------------------------------------------------------------------
// A client that vanishes inside a transaction
// ---------------------------------------------------------------------------------------------

fn vanished_client(path: Path) {
    let rig = Rig::start(path, "", &[]);
    let mut direct = rig.server.client();
    let t = "vanish";
    // psql as the client, killed with SIGKILL while its transaction holds a claim and an
    // uncommitted business row: the kernel closes its socket, it sends nothing more
    let mut psql = Command::new(bindir().join("psql"))
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
        .arg(rig.bouncer.conninfo("single", dba_role()))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start psql");
    psql.stdin
        .as_mut()
        .unwrap()
        .write_all(
            b"BEGIN;\n\
              SELECT outcome FROM idem_claim('vanish', 'gone', 'h');\n\
              INSERT INTO public.effects VALUES ('vanish', 'gone', 'dead client');\n\
              SELECT 'vanishing-client-marker';\n",
        )
        .unwrap();
    psql.stdin.as_mut().unwrap().flush().unwrap();
    let mut dead = 0;
    wait_for(
        "the client's transaction to hold its claim",
        Duration::from_secs(20),
        || {
            let rows = direct
                .query_typed(
                    "SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' \
                      AND query LIKE '%vanishing-client-marker%' AND pid <> pg_backend_pid()",
                    &[],
                )
                .unwrap();
            if let Some(r) = rows.first() {
                dead = r.get(0);
            }
            dead != 0
        },
    );
    // meanwhile the key is in progress (seen directly, not through the busy single pool)
    assert_eq!(claim(&mut direct, t, "gone", "h").outcome, "in_progress");
    // a client of the same one-connection pool waits for a server connection; it must get a
    // fresh one, not the dead client's open transaction
    let waiter = {
        let conninfo = rig.bouncer.conninfo("single", dba_role());
        std::thread::spawn(move || {
            let mut db = Client::connect(&conninfo, NoTls).expect("connect");
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut in_progress = 0;
            loop {
                let mut tx = db.transaction().expect("BEGIN");
                let c = claim(&mut tx, "vanish", "gone", "h");
                if c.outcome == "in_progress" && Instant::now() < deadline {
                    // the dead backend may take a moment to notice and roll back
                    in_progress += 1;
                    drop(tx);
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                // inside the dead transaction this would see its uncommitted row
                let seen = effects(&mut tx, "vanish", "gone");
                if c.outcome == "claimed" {
                    effect(&mut tx, "vanish", "gone", "next client");
                    complete(&mut tx, "vanish", "gone", fence(&c), 200, "{}");
                }
                tx.commit().expect("COMMIT");
                return (c, seen, in_progress);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "the one server connection is busy");
    let killed = Instant::now();
    psql.kill().expect("kill psql");
    let _ = psql.wait();
    let (c, seen, in_progress) = waiter.join().expect("the next client");
    let after_kill = killed.elapsed();
    println!("{path:?}: the next client got the key {after_kill:?} after the kill ({in_progress} in_progress answers first)");
    assert_eq!(c.outcome, "claimed", "the dead client's claim is gone");
    assert_ne!(c.pid, dead, "the next client got another backend");
    assert!(seen.is_empty(), "the next client saw {seen:?}");
    assert!(
        after_kill < Duration::from_secs(10),
        "the next client waited {after_kill:?} after the kill"
    );
    wait_for(
        "pgbouncer to close the dead client's server connection",
        Duration::from_secs(10),
        || {
            count(
                &mut direct,
                &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {dead}"),
            ) == 0
        },
    );
    assert_eq!(effects(&mut direct, t, "gone"), ["next client"]);
    rig.assert_path();
}

// ---------------------------------------------------------------------------------------------
// Lease mode across backends
// ---------------------------------------------------------------------------------------------

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

fn lease_mode(path: Path) {
    let rig = Rig::start(path, "", &[]);
    let mut worker = rig.pooled();
    let mut other = rig.pooled();
    let mut direct = rig.server.client();
    let t = "lease";

    // claim with a lease and commit (autocommit: its own transaction)
    let c = claim_lease(&mut worker, t, "order-1", "30 s");
    assert_eq!(c.outcome, "claimed");
    // the work happens outside the database; then the completion, on another backend
    occupy(&mut other, c.pid);
    let mut tx = worker.transaction().unwrap();
    let done_on = pid(&mut tx);
    assert_ne!(done_on, c.pid, "the completion runs on another backend");
    tx.query_typed(
        "SELECT idem_assert_fence($1, $2, $3)",
        &[
            (&t, Type::TEXT),
            (&"order-1", Type::TEXT),
            (&fence(&c), Type::INT8),
        ],
    )
    .unwrap();
    effect(&mut tx, t, "order-1", "shipped");
    complete(
        &mut tx,
        t,
        "order-1",
        fence(&c),
        200,
        r#"{"shipped": true}"#,
    );
    tx.commit().unwrap();
    end(&mut other);
    let r = claim(&mut other, t, "order-1", "h");
    assert_eq!(
        (r.outcome.as_str(), r.body.as_deref()),
        ("completed", Some(r#"{"shipped": true}"#))
    );

    // a stale worker: its lease passes, another client takes the key over, and its completion,
    // on a backend other than its claim's, is refused with its business write
    let stale = claim_lease(&mut worker, t, "order-2", "200 ms");
    std::thread::sleep(Duration::from_millis(300));
    let taker = claim_lease(&mut other, t, "order-2", "1 min");
    assert_eq!(
        (taker.outcome.as_str(), taker.attempt),
        ("claimed", Some(2))
    );
    occupy(&mut other, stale.pid);
    let mut tx = worker.transaction().unwrap();
    assert_ne!(pid(&mut tx), stale.pid);
    effect(&mut tx, t, "order-2", "stale");
    let err = try_complete(&mut tx, t, "order-2", fence(&stale), 200, "{}").unwrap_err();
    assert_eq!(state_of(&err), "55000");
    drop(tx);
    end(&mut other);
    let mut tx = other.transaction().unwrap();
    effect(&mut tx, t, "order-2", "taker");
    complete(
        &mut tx,
        t,
        "order-2",
        fence(&taker),
        200,
        r#"{"by": "taker"}"#,
    );
    tx.commit().unwrap();
    assert_eq!(effects(&mut direct, t, "order-2"), ["taker"]);
    assert_eq!(
        claim(&mut worker, t, "order-2", "h").body.as_deref(),
        Some(r#"{"by": "taker"}"#)
    );
    rig.assert_path();
}

// ---------------------------------------------------------------------------------------------
// A hostile search_path in one client's transaction
// ---------------------------------------------------------------------------------------------

const LOOKALIKES: &str = "
    CREATE ROLE app LOGIN;
    -- a DBA that is not a superuser may SET ROLE and give a schema only to a role it is a
    -- member of
    GRANT app TO CURRENT_USER;
    CREATE SCHEMA evil AUTHORIZATION app;
    SET ROLE app;
    CREATE TABLE evil.log (what text);
    CREATE TABLE evil.keys (tenant text, key text, fence bigint);
    CREATE TABLE evil.tenant_grants (role oid, tenant text);
    CREATE FUNCTION evil.trap(what text) RETURNS void LANGUAGE sql
      AS $$ INSERT INTO evil.log VALUES (what) $$;
    CREATE FUNCTION evil.idem_claim(tenant text, key text, request_hash text,
        lease interval DEFAULT NULL, ttl interval DEFAULT NULL)
      RETURNS TABLE (outcome text, fence bigint, attempt int, response_code int,
                     response_body jsonb)
      LANGUAGE plpgsql AS $$ BEGIN PERFORM evil.trap('idem_claim');
        RETURN QUERY SELECT 'claimed'::text, 0::bigint, 1, NULL::int, NULL::jsonb; END $$;
    CREATE FUNCTION evil.idem_complete(text, text, bigint, int, jsonb DEFAULT NULL)
      RETURNS timestamptz LANGUAGE plpgsql AS $$ BEGIN PERFORM evil.trap('idem_complete');
        RETURN now(); END $$;
    CREATE FUNCTION evil.text_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql
      AS $$ BEGIN PERFORM evil.trap('='); RETURN a OPERATOR(pg_catalog.=) b; END $$;
    CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_eq);
    CREATE FUNCTION evil.pg_has_role(name, oid, text) RETURNS boolean LANGUAGE plpgsql
      AS $$ BEGIN PERFORM evil.trap('pg_has_role'); RETURN true; END $$;
    CREATE FUNCTION evil.nextval(regclass) RETURNS bigint LANGUAGE plpgsql
      AS $$ BEGIN PERFORM evil.trap('nextval'); RETURN 1; END $$;
    CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql
      AS $$ BEGIN PERFORM evil.trap('now'); RETURN 'epoch'; END $$;
    RESET ROLE;
    REVOKE app FROM CURRENT_USER;
";

fn search_path_lookalikes(path: Path) {
    let rig = Rig::start(path, LOOKALIKES, &["app"]);
    let t = "sp";
    let mut hostile = rig.bouncer.connect("single", "app");
    let mut next = rig.bouncer.connect("single", "app");
    // the log's owner reads it, past the pooler
    let mut direct = rig.server.client_as("app");
    let log = |direct: &mut Client| -> Vec<String> {
        direct
            .query_typed("SELECT what FROM evil.log", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    for round in 0..3 {
        let key = format!("k{round}");
        // the hostile transaction: look-alikes first, even before pg_catalog; pg_idem's own
        // functions, called qualified, behave as ever
        hostile
            .batch_execute("BEGIN; SET LOCAL search_path = evil, pg_catalog, public")
            .unwrap();
        let hostile_pid = pid(&mut hostile);
        let rows = hostile
            .query_typed(
                "SELECT c.outcome, c.fence FROM public.idem_claim($1, $2, 'h') AS c",
                &[(&t, Type::TEXT), (&key.as_str(), Type::TEXT)],
            )
            .unwrap();
        assert_eq!(rows[0].get::<_, String>(0), "claimed");
        let f: i64 = rows[0].get(1);
        // (the look-alike's is 0; a fresh SQL edition's first fence is 1)
        assert!(f > 0, "a real fence");
        hostile
            .query_typed(
                "SELECT public.idem_complete($1, $2, $3, 200, '{\"round\": 1}'::pg_catalog.jsonb)",
                &[
                    (&t, Type::TEXT),
                    (&key.as_str(), Type::TEXT),
                    (&f, Type::INT8),
                ],
            )
            .unwrap();
        hostile.batch_execute("COMMIT").unwrap();
        assert!(log(&mut direct).is_empty(), "pg_idem ran a look-alike");

        // the next client on the same backend: default search_path, pg_idem's functions
        let path_now = simple_one(&mut next, "SHOW search_path").unwrap();
        assert_eq!(path_now.as_deref(), Some("\"$user\", public"));
        let r = claim(&mut next, t, &key, "h");
        assert_eq!(r.pid, hostile_pid, "the same backend");
        assert_eq!(
            (r.outcome.as_str(), r.body.as_deref()),
            ("completed", Some(r#"{"round": 1}"#))
        );
        let fresh = claim(&mut next, t, &format!("fresh{round}"), "h");
        assert_eq!(fresh.outcome, "claimed");
        assert!(fence(&fresh) > f);
        let mut tx = next.transaction().unwrap();
        let c = claim(&mut tx, t, &format!("tx{round}"), "h");
        effect(&mut tx, t, &format!("tx{round}"), "next");
        complete(&mut tx, t, &format!("tx{round}"), fence(&c), 201, "{}");
        tx.commit().unwrap();
        assert_eq!(
            claim(&mut next, t, &format!("tx{round}"), "other").outcome,
            "mismatch"
        );
        assert!(
            log(&mut direct).is_empty(),
            "a look-alike ran: {:?}",
            log(&mut direct)
        );
    }
    // and the look-alikes do run when a name resolves to them: a leak would have shown
    hostile
        .batch_execute(
            "BEGIN; SET LOCAL search_path = evil, pg_catalog, public; \
             SELECT * FROM idem_claim('x', 'y', 'z'); COMMIT",
        )
        .unwrap();
    assert_eq!(log(&mut direct), ["idem_claim"]);
    rig.assert_path();
}

// ---------------------------------------------------------------------------------------------
// Tenant grants with SET LOCAL ROLE per transaction
// ---------------------------------------------------------------------------------------------

/// The roles, their tenants and pg_idem.tenant_grants on (as the edition under test sets it).
fn tenant_roles() -> String {
    format!(
        "CREATE ROLE app_a NOLOGIN;
         CREATE ROLE app_b NOLOGIN;
         CREATE ROLE authn LOGIN NOINHERIT IN ROLE app_a, app_b;
         SELECT idem_grant_tenant('app_a', 'ta'), idem_grant_tenant('app_b', 'tb');
         {};",
        owner_setting_sql("pg_idem.tenant_grants", Some("on"))
    )
}

/// One transaction as `role` (None: the login role): (backend pid, claim's outcome or SQLSTATE).
fn as_role(db: &mut Client, role: Option<&str>, tenant: &str, key: &str) -> (i32, String) {
    db.batch_execute("BEGIN").unwrap();
    if let Some(role) = role {
        db.batch_execute(&format!("SET LOCAL ROLE {role}")).unwrap();
    }
    let backend = pid(db);
    let answer = match try_claim(db, tenant, key, "h", None) {
        Ok(c) => {
            db.batch_execute("COMMIT").unwrap();
            c.outcome
        }
        Err(e) => {
            db.batch_execute("ROLLBACK").unwrap();
            state_of(&e)
        }
    };
    (backend, answer)
}

fn tenant_grants(path: Path) {
    let rig = Rig::start(path, &tenant_roles(), &["authn"]);
    let mut a = rig.bouncer.connect("single", "authn");
    let mut b = rig.bouncer.connect("single", "authn");
    let mut admin = rig.server.client();
    let setting = match edition() {
        Edition::Native => simple_one(&mut a, "SHOW pg_idem.tenant_grants"),
        // the owner's table, which no client of the pooler may read
        Edition::Sql => simple_one(
            &mut admin,
            "SELECT value FROM idem.settings WHERE name = 'pg_idem.tenant_grants'",
        ),
    };
    assert_eq!(
        setting.unwrap().as_deref(),
        Some("on"),
        "set for the database"
    );

    // clients A and B share the one backend, transaction after transaction, each as its role;
    // every answer is checked as the role the transaction runs as, cached answers included
    let mut backends = std::collections::BTreeSet::new();
    for round in 0..3 {
        let k = |name: &str| format!("{name}-{round}");
        // (client: 0 is A, 1 is B, role, tenant, key, expected)
        let steps = [
            (0, Some("app_a"), "ta", k("a-own"), "claimed"),
            (1, Some("app_b"), "ta", k("b-on-a"), "42501"),
            (1, Some("app_b"), "tb", k("b-own"), "claimed"),
            (0, Some("app_a"), "tb", k("a-on-b"), "42501"),
            (1, None, "tb", k("login-role"), "42501"),
            (0, Some("app_a"), "ta", k("a-own"), "in_progress"),
        ];
        for (client, role, tenant, key, expected) in steps {
            let db = if client == 0 { &mut a } else { &mut b };
            let (backend, answer) = as_role(db, role, tenant, &key);
            assert_eq!(
                answer, expected,
                "round {round}: client {client} as {role:?} claiming {tenant}/{key}"
            );
            backends.insert(backend);
        }
    }
    assert_eq!(
        backends.len(),
        1,
        "A's and B's transactions shared one backend"
    );
    // SET LOCAL ROLE ended with each transaction
    assert_eq!(
        simple_one(&mut b, "SELECT current_user")
            .unwrap()
            .as_deref(),
        Some("authn")
    );

    // SET ROLE ... RESET ROLE inside one transaction: each call checked as the role of its
    // moment; the next transaction on the backend runs as the login role
    b.batch_execute("BEGIN; SET ROLE app_b").unwrap();
    assert_eq!(claim(&mut b, "tb", "set-role", "h").outcome, "claimed");
    b.batch_execute("SAVEPOINT s").unwrap();
    let e = try_claim(&mut b, "ta", "set-role", "h", None).unwrap_err();
    assert_eq!(state_of(&e), "42501");
    b.batch_execute("ROLLBACK TO SAVEPOINT s; RESET ROLE; SAVEPOINT s2")
        .unwrap();
    let e = try_claim(&mut b, "tb", "set-role-2", "h", None).unwrap_err();
    assert_eq!(
        state_of(&e),
        "42501",
        "after RESET ROLE: the NOINHERIT login"
    );
    b.batch_execute("ROLLBACK TO SAVEPOINT s2; SET ROLE app_a")
        .unwrap();
    assert_eq!(claim(&mut b, "ta", "set-role", "h").outcome, "claimed");
    b.batch_execute("RESET ROLE; COMMIT").unwrap();
    assert_eq!(
        simple_one(&mut a, "SELECT current_user")
            .unwrap()
            .as_deref(),
        Some("authn")
    );
    assert_eq!(as_role(&mut a, None, "ta", "after-reset").1, "42501");

    // a revoke counts from the next transaction on, on every backend: warm up both backends of
    // the two-connection pool with app_a's answer for ta, revoke, and ask both again
    let mut p1 = rig.bouncer.connect("postgres", "authn");
    let mut p2 = rig.bouncer.connect("postgres", "authn");
    let both = |p1: &mut Client, p2: &mut Client, key: &str| -> Vec<(i32, String)> {
        // both transactions open at once: two backends
        let mut out = Vec::new();
        for db in [&mut *p1, &mut *p2] {
            db.batch_execute("BEGIN; SET LOCAL ROLE app_a").unwrap();
        }
        for (i, db) in [&mut *p1, &mut *p2].into_iter().enumerate() {
            let backend = pid(db);
            db.batch_execute("SAVEPOINT s").unwrap();
            let answer = match try_claim(db, "ta", &format!("{key}-{i}"), "h", None) {
                Ok(c) => c.outcome,
                Err(e) => state_of(&e),
            };
            db.batch_execute("ROLLBACK TO SAVEPOINT s").unwrap();
            out.push((backend, answer));
        }
        for db in [&mut *p1, &mut *p2] {
            db.batch_execute("COMMIT").unwrap();
        }
        out
    };
    let before = both(&mut p1, &mut p2, "warm");
    assert_ne!(before[0].0, before[1].0, "two backends");
    assert!(before.iter().all(|(_, a)| a == "claimed"), "{before:?}");
    let revoked: bool = admin
        .query_one("SELECT idem_revoke_tenant('app_a', 'ta')", &[])
        .unwrap()
        .get(0);
    assert!(revoked);
    let after = both(&mut p1, &mut p2, "revoked");
    let backends_before: std::collections::BTreeSet<i32> = before.iter().map(|b| b.0).collect();
    let backends_after: std::collections::BTreeSet<i32> = after.iter().map(|b| b.0).collect();
    assert_eq!(backends_before, backends_after, "the same two backends");
    assert!(after.iter().all(|(_, a)| a == "42501"), "{after:?}");
    assert_eq!(
        as_role(&mut a, Some("app_a"), "ta", "revoked-single").1,
        "42501"
    );
    // app_b's grant is untouched
    assert_eq!(as_role(&mut b, Some("app_b"), "tb", "still").1, "claimed");
    rig.assert_path();
}

// ---------------------------------------------------------------------------------------------
// Why query_typed: named statements through a transaction pooler
// ---------------------------------------------------------------------------------------------

#[test]
fn named_statements_need_a_transaction() {
    let rig = Rig::start(Path::Engine, "", &[]);
    let mut db = rig.pooled();
    let mut other = rig.pooled();
    // inside one transaction the client stays on one backend: `query` (a named statement,
    // prepared and executed in two round trips) works
    let mut tx = db.transaction().unwrap();
    let row = tx
        .query_one(
            "SELECT outcome FROM idem_claim($1, $2, $3)",
            &[&"named", &"k1", &"h"],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "claimed");
    tx.commit().unwrap();
    // outside one, the statement is prepared on one backend and may be executed on another,
    // where it does not exist: forced here by occupying the backend it was prepared on
    let statement = db
        .prepare("SELECT outcome FROM idem_claim($1, $2, $3)")
        .unwrap();
    let prepared_on = simple_one(&mut db, "SELECT pg_backend_pid()")
        .unwrap()
        .unwrap()
        .parse::<i32>()
        .unwrap();
    occupy(&mut other, prepared_on);
    let err = db.query(&statement, &[&"named", &"k2", &"h"]).unwrap_err();
    assert_eq!(state_of(&err), "26000", "prepared statement does not exist");
    end(&mut other);
    // query_typed sends it whole, unnamed: it works anywhere
    assert_eq!(
        try_claim(&mut db, "named", "k2", "h", None)
            .unwrap()
            .outcome,
        "claimed"
    );
}

// ---------------------------------------------------------------------------------------------
// Session mode: a backend per client session, DISCARD ALL between clients
// ---------------------------------------------------------------------------------------------

fn session_mode(path: Path) {
    let rig = Rig::start(path, "", &[]);
    let t = "session";
    // the first client: a session setting, named statements outside transactions (they work in
    // session mode), a committed claim in lease mode
    let mut first = rig.bouncer.connect("session", dba_role());
    first
        .batch_execute("SET pg_idem.lease_timeout = '7 min'")
        .unwrap();
    let first_pid = pid(&mut first);
    let row = first
        .query_one(
            "SELECT c.fence, c.lease_expires_at - now() > interval '6 min' \
               FROM idem_claim($1, $2, $3) AS c",
            &[&t, &"k1", &"h"],
        )
        .unwrap();
    let f: i64 = row.get(0);
    assert!(row.get::<_, bool>(1), "the session's lease_timeout counted");
    for key in ["k2", "k3"] {
        let c = first
            .query_one(
                "SELECT c.outcome FROM idem_claim($1, $2, $3) AS c",
                &[&t, &key, &"h"],
            )
            .unwrap();
        assert_eq!(c.get::<_, String>(0), "claimed");
    }
    drop(first);
    // the next client gets the same backend, after DISCARD ALL: the setting is gone, pg_idem's
    // own plans (SPI path) are planned again and answer as before
    let mut next = rig.bouncer.connect("session", dba_role());
    wait_for("the same backend", Duration::from_secs(10), || {
        pid(&mut next) == first_pid
    });
    // (in the SQL edition the setting is a placeholder, which DISCARD ALL empties: the default)
    let default = match edition() {
        Edition::Native => "1min",
        Edition::Sql => "",
    };
    assert_eq!(
        simple_one(&mut next, "SHOW pg_idem.lease_timeout")
            .unwrap()
            .as_deref(),
        Some(default)
    );
    assert_eq!(claim(&mut next, t, "k1", "h").outcome, "in_progress");
    let mut tx = next.transaction().unwrap();
    effect(&mut tx, t, "k1", "session");
    complete(&mut tx, t, "k1", f, 201, r#"{"mode": "session"}"#);
    tx.commit().unwrap();
    let r = claim(&mut next, t, "k1", "h");
    assert_eq!(
        (r.outcome.as_str(), r.body.as_deref()),
        ("completed", Some(r#"{"mode": "session"}"#))
    );
    let fresh = claim(&mut next, t, "k4", "h");
    assert_eq!(fresh.outcome, "claimed");
    assert!(fence(&fresh) > f);
    assert_eq!(effects(&mut rig.server.client(), t, "k1"), ["session"]);
    rig.assert_path();
}

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

on_both_paths!(core, core_on_the_engine_path, core_on_the_spi_path);
on_both_paths!(crowd, crowd_on_the_engine_path, crowd_on_the_spi_path);
on_both_paths!(
    vanished_client,
    a_vanished_client_on_the_engine_path,
    a_vanished_client_on_the_spi_path
);
on_both_paths!(
    lease_mode,
    lease_mode_on_the_engine_path,
    lease_mode_on_the_spi_path
);
on_both_paths!(
    search_path_lookalikes,
    search_path_lookalikes_on_the_engine_path,
    search_path_lookalikes_on_the_spi_path
);
on_both_paths!(
    tenant_grants,
    tenant_grants_on_the_engine_path,
    tenant_grants_on_the_spi_path
);
on_both_paths!(
    session_mode,
    session_mode_on_the_engine_path,
    session_mode_on_the_spi_path
);
