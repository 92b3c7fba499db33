//! Moving between editions keeps every key: a team leaving a managed PostgreSQL (RDS, Aurora,
//! Supabase: the SQL edition through pg_tle, or installed plainly) for its own servers (the
//! native edition), or the reverse. Each test sets up keys in every state on a source (claims in
//! progress holding leases, completed and failed keys with their responses, checkpoints,
//! consumed messages, expired keys, released keys, watermarks, tenant grants), records every
//! answer an application gets for them, moves them with the stock client tools exactly as
//! written below, and checks on the target: the same answers, leases still held (a fence is
//! data: the source's fence completes the key on the target), every new fence above every
//! fence the source handed out (a new key, a takeover, an expired key claimed again), grants
//! still effective, watermarks kept, and a target's own fence floor never lowered. The targets
//! of the SQL edition through pg_tle are managed-style servers worked by `app_admin`, which is
//! not a superuser (tests/harness/managed.rs).
//!
//! # The paths
//!
//! `SRC` and `DST` stand for connection options (`-h host -p port -d app`); `-U owner` is the
//! role that owns pg_idem's tables on that side: natively the superuser who ran `CREATE
//! EXTENSION pg_idem` (the tables are revoked from everyone else), in the SQL edition the role
//! that installed it (on RDS the master user). No path needs a superuser on the managed side.
//! Use the client tools of one release, the target's major version or newer: pg_dump's output
//! starts with `\restrict`, which a psql older than the same minor releases does not know.
//!
//! ## pg_idem's rows only: every direction (native <-> SQL edition, plain or pg_tle)
//!
//! 1. Stop the application's writers on the source: what the source hands out after step 3
//!    read its sequence does not move.
//! 2. On the target, before the application connects to it: the roles that tenant grants name,
//!    under the same names; then the other edition, freshly installed in the database:
//!    - native: `shared_preload_libraries = 'pg_idem'` (a restart), then as a superuser
//!      `CREATE EXTENSION pg_idem;`
//!    - SQL edition, plain: `psql DST -U owner -X -1 -v ON_ERROR_STOP=1 -f pg_idem--0.5.0.sql`
//!    - SQL edition, pg_tle: `psql DST -U owner -X -v ON_ERROR_STOP=1 -f pg_idem--0.5.0.tle.sql`
//!      then `CREATE EXTENSION pg_idem;`
//! 3. The rows (keys, watermarks, tenant grants), as data only, then the fence floor, which
//!    goes up to the source's and never down (a target that handed out fences already keeps
//!    its higher floor):
//!    ```sh
//!    pg_dump SRC -U owner --data-only --table='idem.*' \
//!        --exclude-table=idem.settings --exclude-table=idem.role_settings \
//!        --exclude-table=idem.key_lock_secret --exclude-table=idem.fence_seq -f idem-rows.sql
//!    psql DST -U owner -X -1 -v ON_ERROR_STOP=1 -f idem-rows.sql
//!    floor=$(psql SRC -U owner -X -A -t -c 'SELECT last_value FROM idem.fence_seq')
//!    psql DST -U owner -X -v ON_ERROR_STOP=1 \
//!        -c "SELECT setval('idem.fence_seq', GREATEST(last_value, $floor)) FROM idem.fence_seq"
//!    ```
//!    A native target that has handed out fences since it started lifts its fence counter to
//!    each restored row's fence as the COPY writes it (pg_idem's trigger `lift_fence_clock` on
//!    idem.keys; see the test at the end), so no restart is needed for keys that moved; the
//!    floor itself, which also covers fences of keys the source purged or forgot, it lifts
//!    its counter to at its next start.
//! 4. The settings, by hand: they are no rows of the native edition. To the SQL edition, as its
//!    owner: `INSERT INTO idem.settings VALUES ('pg_idem.tenant_grants', 'on') ON CONFLICT (name)
//!    DO UPDATE SET value = EXCLUDED.value;` (and each setting changed from its default, with
//!    the native units: `pg_idem.ttl`, `lease_timeout`, `max_key_length`, ...; a role's in
//!    `idem.role_settings`). To the native edition, as a superuser:
//!    `ALTER DATABASE app SET pg_idem.tenant_grants = on;` (or in postgresql.conf), and the
//!    others likewise (a role's with `ALTER ROLE`). Until then the target does not enforce
//!    tenant grants.
//! 5. Point the application at the target. (Natively a session caches which tenants its role
//!    may act on; rows restored by COPY reach a session opened before all the same, through
//!    idem.tenant_grants' statement trigger.)
//!
//! Why so: `--table='idem.*'` and not `--schema=idem`, because natively and through pg_tle the
//! tables belong to the extension, and `pg_dump --schema=idem` dumps no row of an extension's
//! table (checked below); `--exclude-table=idem.settings` (and `idem.role_settings`) because the
//! SQL edition's settings are no table of the native edition and the SQL edition installs its own rows of them (the
//! COPY would fail on either), and `idem.key_lock_secret` for the same reason (each SQL edition
//! install draws its own); the sequence apart, because the dump's `setval` would set the
//! target's floor to the source's even where the target's is higher (a native target that
//! handed out fences before: its floor is a clock's, far above any SQL edition's). Restored
//! rows go in after the install, into its empty tables: the SQL edition's own rows are only
//! its settings. `idem.tenant_grants` holds regrole: the dump writes role names, which must
//! exist on the target before the COPY (else the whole transaction fails).
//!
//! ## A whole database, native -> SQL edition through pg_tle
//!
//! With pg_tle created in the target database, pg_idem registered there but not created
//! (`psql DST -U owner -X -v ON_ERROR_STOP=1 -f pg_idem--0.5.0.tle.sql`) and the roles in
//! place, the native dump's `CREATE EXTENSION pg_idem` creates the SQL edition, and the
//! config-dumped rows and the sequence follow it, with the application's own tables:
//! ```sh
//! pg_dump SRC -U postgres -Fc -f app.dump
//! pg_restore DST -U owner --exit-on-error -d app app.dump
//! ```
//! then step 4 (the target is fresh: the sequence set by the dump lowers nothing). As a
//! non-superuser restore, objects the dump gives to other owners need `--no-owner`.
//!
//! ## A whole database, SQL edition through pg_tle -> native
//!
//! The dump of a pg_tle database carries pg_tle itself and pg_idem's registration, which a
//! native server has no use for, and the settings' rows, which it has no table for: leave them
//! out of the restore's list. The target database is new (no pg_idem in it), on a server that
//! preloads pg_idem; the dump's `CREATE EXTENSION pg_idem` creates the native edition there:
//! ```sh
//! pg_dump SRC -U owner -Fc -f app.dump
//! pg_restore -l app.dump | grep -v -E ' pg_?tle( |$)|TABLE DATA idem (role_)?settings' > app.list
//! pg_restore DST -U postgres --exit-on-error -L app.list -d app app.dump
//! ```
//! then step 4.
//!
//! No whole-database path leaves a plain install or arrives at one: the plain install is no
//! extension, so its dump recreates its functions as the application's own objects, and a
//! native dump's `CREATE EXTENSION pg_idem` needs the library or pg_tle. Use the rows' path.
//!
//! # What does not move
//!
//! - The settings (step 4): GUCs natively, rows of idem.settings and idem.role_settings in the
//!   SQL edition.
//! - The native edition's counters and statistics (shared memory, reset at every restart
//!   anyway) and the purge worker's status: the SQL edition has none of them.
//! - Watermarks move as rows either way, but the SQL edition cannot use them yet
//!   (`idem_claim_seq` and `idem_watermark` answer 0A000): the tests check them through the
//!   functions where the target has them, and read the rows otherwise.
//! - Leases move as times: a lease keeps running while the move lasts, and a key whose lease
//!   ends meanwhile is taken over on the target (from its last checkpoint) like on the source.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pg_idem_tests::managed::{self, ManagedServer};
use pg_idem_tests::{as_server_user, bindir, major, sqlstate, Client, Column, NoTls, Server};

const ADMIN: &str = managed::ADMIN;
const USER: &str = managed::USER;
/// Every side's database, as on a managed server.
const DB: &str = managed::DATABASE;

/// The generated SQL edition: (plain install, pg_tle package).
fn edition() -> &'static (String, String) {
    static EDITION: OnceLock<(String, String)> = OnceLock::new();
    EDITION.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let out =
            std::env::temp_dir().join(format!("pg_idem_sql_edition_moves_{}", std::process::id()));
        let status = Command::new("python3")
            .arg(root.join("scripts/sql_edition.py"))
            .arg("--out")
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run scripts/sql_edition.py");
        assert!(status.success(), "scripts/sql_edition.py failed");
        let read = |tle: bool| {
            let path = std::fs::read_dir(&out)
                .expect("edition output")
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .find(|p| {
                    let name = p.to_string_lossy();
                    name.ends_with(".sql") && name.ends_with(".tle.sql") == tle
                })
                .unwrap_or_else(|| panic!("scripts/sql_edition.py built no file (tle: {tle})"));
            std::fs::read_to_string(path).expect("read the edition")
        };
        let built = (read(false), read(true));
        let _ = std::fs::remove_dir_all(&out);
        built
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// pg_idem's library preloaded, CREATE EXTENSION pg_idem
    Native,
    /// the SQL edition's plain install, run by app_admin (not a superuser)
    Plain,
    /// the SQL edition through pg_tle, on a managed-style server
    Tle,
}

enum Host {
    Local(Server),
    Managed(ManagedServer),
}

/// One side of a move: a server and its database `app`.
struct Side {
    kind: Kind,
    host: Host,
}

/// What a side is given before the move.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Install {
    /// pg_idem installed (the target of a move of rows, or a source)
    Installed,
    /// pg_idem not in the database (natively), or registered with pg_tle but not created: the
    /// target of a whole-database restore
    Bare,
    /// pg_idem neither in the database nor registered with pg_tle (only pg_tle created): the
    /// target of a whole-database restore of a pg_tle database
    Nothing,
}

fn run_ok(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn local_roles_and_database(server: &Server) {
    let mut postgres = server.client();
    postgres
        .batch_execute(&format!(
            "CREATE ROLE {ADMIN} LOGIN CREATEROLE; CREATE ROLE {USER} LOGIN;"
        ))
        .expect("roles");
    postgres
        .batch_execute(&format!("CREATE DATABASE {DB} OWNER {ADMIN}"))
        .expect("database app");
    // PostgreSQL 14 lets PUBLIC create in public; 15 and later its database's owner
    server
        .client_db(DB)
        .batch_execute(&format!("GRANT CREATE ON SCHEMA public TO {ADMIN}"))
        .expect("grant create on public");
}

impl Side {
    fn native(install: Install) -> Side {
        // the purge worker paused: the expired keys must still be there when they move
        let server = Server::start_bare(&[
            "shared_preload_libraries = 'pg_idem'",
            "pg_idem.purge_interval = 0",
        ]);
        local_roles_and_database(&server);
        if install == Install::Installed {
            server
                .client_db(DB)
                .batch_execute("CREATE EXTENSION pg_idem")
                .expect("create extension pg_idem");
        }
        Side {
            kind: Kind::Native,
            host: Host::Local(server),
        }
    }

    fn plain() -> Side {
        let server = Server::start_bare(&[]);
        local_roles_and_database(&server);
        let side = Side {
            kind: Kind::Plain,
            host: Host::Local(server),
        };
        let file = side.file("pg_idem-plain.sql", &edition().0);
        run_ok(
            "the plain install",
            side.psql(
                ADMIN,
                &["-X", "-q", "-1", "-v", "ON_ERROR_STOP=1", "-f", &file],
            ),
        );
        side
    }

    /// None when this machine has no managed-style server (the test is reported skipped).
    fn tle(install: Install) -> Option<Side> {
        let server = ManagedServer::start(major())?;
        let side = Side {
            kind: Kind::Tle,
            host: Host::Managed(server),
        };
        if install == Install::Nothing {
            return Some(side);
        }
        let file = side.file("pg_idem-tle.sql", &edition().1);
        run_ok(
            "pgtle.install_extension",
            side.psql(ADMIN, &["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", &file]),
        );
        if install == Install::Installed {
            side.connect(ADMIN)
                .batch_execute("CREATE EXTENSION pg_idem")
                .expect("CREATE EXTENSION pg_idem through pg_tle");
        }
        Some(side)
    }

    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Native => "native",
            Kind::Plain => "SQL edition (plain)",
            Kind::Tle => "SQL edition (pg_tle)",
        }
    }

    fn port(&self) -> u16 {
        match &self.host {
            Host::Local(s) => s.port,
            Host::Managed(s) => s.port,
        }
    }

    fn dir(&self) -> &Path {
        match &self.host {
            Host::Local(s) => s.dir(),
            Host::Managed(s) => s.dir(),
        }
    }

    /// Writes `text` into a file of this side's directory (which the server's OS user reads).
    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir().join(name);
        std::fs::write(&path, text).expect("write a file for psql");
        path.to_string_lossy().into_owned()
    }

    fn bin(&self, program: &str) -> PathBuf {
        match &self.host {
            Host::Local(_) => bindir().join(program),
            Host::Managed(s) => s.bindir().join(program),
        }
    }

    /// A program of this side's PostgreSQL (pg_dump, psql, ...) as the server's OS user.
    fn run_bin(&self, program: &str, args: &[&str]) -> Output {
        let mut cmd = as_server_user(&self.bin(program));
        cmd.args(args);
        cmd.output().unwrap_or_else(|e| panic!("{program}: {e}"))
    }

    /// The connection options of the commands in the module documentation.
    fn conn(&self, role: &str) -> Vec<String> {
        [
            "-h",
            "127.0.0.1",
            "-p",
            &self.port().to_string(),
            "-U",
            role,
            "-d",
            DB,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn psql(&self, role: &str, args: &[&str]) -> Output {
        let mut all: Vec<String> = self.conn(role);
        all.extend(args.iter().map(|s| s.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        self.run_bin("psql", &all)
    }

    /// The role that owns pg_idem's tables: natively the superuser who created the extension.
    fn owner(&self) -> &'static str {
        match self.kind {
            Kind::Native => "postgres",
            Kind::Plain | Kind::Tle => ADMIN,
        }
    }

    /// A session as `role` in database app; times in UTC, so that answers compare as text.
    fn connect(&self, role: &str) -> Client {
        let conninfo = format!(
            "host=127.0.0.1 port={} user={role} dbname={DB} connect_timeout=10 \
             options='-c statement_timeout=60s -c TimeZone=UTC'",
            self.port()
        );
        Client::connect(&conninfo, NoTls)
            .unwrap_or_else(|e| panic!("{}: connect as {role}: {e}", self.name()))
    }

    fn user(&self) -> Client {
        self.connect(USER)
    }

    fn owner_client(&self) -> Client {
        self.connect(self.owner())
    }

    /// Step 4 of the module documentation: tenant grants enforced, as each edition's
    /// administrator turns them on.
    fn tenant_grants_on(&self) {
        match self.kind {
            Kind::Native => self
                .owner_client()
                .batch_execute(&format!(
                    "ALTER DATABASE {DB} SET pg_idem.tenant_grants = on"
                ))
                .expect("tenant_grants on"),
            Kind::Plain | Kind::Tle => {
                let n = self
                    .owner_client()
                    .execute(
                        "INSERT INTO idem.settings VALUES ('pg_idem.tenant_grants', 'on') \
                         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                        &[],
                    )
                    .expect("tenant_grants on");
                assert_eq!(n, 1, "idem.settings: pg_idem.tenant_grants not set");
            }
        }
    }

    fn grant(&self, tenant: &str) {
        self.owner_client()
            .execute(
                "SELECT idem_grant_tenant($1::text::regrole, $2)",
                &[&USER, &tenant],
            )
            .expect("idem_grant_tenant");
    }

    /// The fence floor: the sequence's last value.
    fn floor(&self) -> i64 {
        self.owner_client()
            .query_one("SELECT last_value FROM idem.fence_seq", &[])
            .expect("read idem.fence_seq")
            .get(0)
    }
}

// ---------------------------------------------------------------------------------------------
// The keys of a source, and what an application is told about them
// ---------------------------------------------------------------------------------------------

const BODY: &str = r#"{"id": 1, "amount": 99.90}"#;

/// What the source looked like when it moved.
struct Before {
    /// every answer an application gets for the keys whose answers do not change by themselves
    answers: Vec<String>,
    /// every fence the source handed out
    fences: Vec<i64>,
    /// t1/held: in progress, its lease an hour long
    held: i64,
    /// t1/stalled: in progress, its lease a second long, with a checkpoint
    stalled: i64,
    stalled_lease_ends: Instant,
    /// whether the source had watermarks (idem_claim_seq worked there)
    watermarks: bool,
    /// the source's fence floor
    floor: i64,
}

impl Before {
    fn max_fence(&self) -> i64 {
        *self.fences.iter().max().expect("fences")
    }
}

fn claim_fence(db: &mut Client, tenant: &str, key: &str, lease: &str, ttl: &str) -> i64 {
    let row = db
        .query_one(
            "SELECT outcome, fence FROM idem_claim($1, $2, 'h', lease => $3::text::interval, \
                    ttl => $4::text::interval)",
            &[&tenant, &key, &lease, &ttl],
        )
        .unwrap_or_else(|e| panic!("claim {tenant}/{key}: {e:?}"));
    assert_eq!(row.get::<_, String>(0), "claimed", "{tenant}/{key}");
    row.get(1)
}

/// Sets up keys in every state on `source` through its application role, with tenant grants
/// on, and records what the application is told; `orders`: a business table written in the
/// transactions of the completed key (the whole-database paths move it too).
fn populate(source: &Side, orders: bool) -> Before {
    source.tenant_grants_on();
    source.grant("t1");
    source.grant("t2");
    if orders {
        let mut owner = source.owner_client();
        owner
            .batch_execute(&format!(
                "CREATE TABLE public.orders (key text PRIMARY KEY, amount numeric NOT NULL);
                 ALTER TABLE public.orders OWNER TO {ADMIN};
                 GRANT SELECT, INSERT ON public.orders TO {USER};"
            ))
            .expect("orders");
    }
    let mut db = source.user();
    let mut fences = Vec::new();

    // completed, in the business transaction
    let mut tx = db.transaction().expect("begin");
    let row = tx
        .query_one(
            "SELECT outcome, fence FROM idem_claim('t1', 'done', 'h')",
            &[],
        )
        .expect("claim t1/done");
    assert_eq!(row.get::<_, String>(0), "claimed");
    let fence: i64 = row.get(1);
    fences.push(fence);
    if orders {
        tx.execute("INSERT INTO public.orders VALUES ('done', 99.90)", &[])
            .expect("the business write");
    }
    tx.execute(
        "SELECT idem_complete('t1', 'done', $1, 201, $2::text::jsonb)",
        &[&fence, &BODY],
    )
    .expect("complete t1/done");
    tx.commit().expect("commit");
    // completed without a body, in another tenant
    let fence = claim_fence(&mut db, "t2", "done2", "1 minute", "1 day");
    fences.push(fence);
    db.execute("SELECT idem_complete('t2', 'done2', $1, 204)", &[&fence])
        .expect("complete t2/done2");
    // a final failure
    let fence = claim_fence(&mut db, "t1", "failed", "1 minute", "1 day");
    fences.push(fence);
    db.execute(
        "SELECT idem_fail_final('t1', 'failed', $1, 409, '{\"error\": \"conflict\"}')",
        &[&fence],
    )
    .expect("fail t1/failed");
    // in progress: a lease of an hour, with a checkpoint, and one of a second
    let held = claim_fence(&mut db, "t1", "held", "1 hour", "1 day");
    fences.push(held);
    db.execute(
        "SELECT idem_checkpoint('t1', 'held', $1, 'charged', '{\"charge\": \"ch_1\"}')",
        &[&held],
    )
    .expect("checkpoint t1/held");
    let stalled = claim_fence(&mut db, "t1", "stalled", "1 second", "1 day");
    let stalled_lease_ends = Instant::now() + Duration::from_millis(1100);
    fences.push(stalled);
    db.execute(
        "SELECT idem_checkpoint('t1', 'stalled', $1, 'step-2', '{\"n\": 2}')",
        &[&stalled],
    )
    .expect("checkpoint t1/stalled");
    // released: given back, so absent
    let fence = claim_fence(&mut db, "t1", "released", "1 minute", "1 day");
    fences.push(fence);
    db.execute("SELECT idem_release('t1', 'released', $1)", &[&fence])
        .expect("release t1/released");
    // expiring within a second: in progress, and completed (a second, not less: a loaded
    // machine must not see a key expire between its claim and its completion)
    fences.push(claim_fence(&mut db, "t2", "gone", "1 second", "1 second"));
    let fence = claim_fence(&mut db, "t2", "brief", "1 minute", "1 second");
    fences.push(fence);
    db.execute("SELECT idem_complete('t2', 'brief', $1, 200)", &[&fence])
        .expect("complete t2/brief");
    // consumed messages (narrow rows), one of them expiring
    db.batch_execute(
        "SELECT idem_consume('t1', 'm1');
         SELECT idem_consume('t1', 'm2');
         SELECT * FROM idem_consume_many('t2', ARRAY['m3', 'm4']);
         SELECT idem_consume('t1', 'm-brief', '1 second');",
    )
    .expect("consume");
    let expired = Instant::now() + Duration::from_millis(1200);
    // watermarks, where the edition has them
    let watermarks = match db.batch_execute(
        "SELECT * FROM idem_claim_seq('t1', 'partition-0', 1234);
         SELECT * FROM idem_claim_seq('t2', 'p1', 7);",
    ) {
        Ok(()) => true,
        Err(e) if sqlstate(&e) == "0A000" => {
            eprintln!(
                "note: {} has no idem_claim_seq yet (0A000): this move carries no watermark",
                source.name()
            );
            false
        }
        Err(e) => panic!("idem_claim_seq on {}: {e:?}", source.name()),
    };
    // the expiring keys expire
    std::thread::sleep(expired.saturating_duration_since(Instant::now()));

    let floor = source.floor();
    for fence in &fences {
        assert!(
            *fence <= floor,
            "{}: fence {fence} above the floor {floor} (idem.fence_seq)",
            source.name()
        );
    }
    Before {
        answers: answers(&mut source.user()),
        fences,
        held,
        stalled,
        stalled_lease_ends,
        watermarks,
        floor,
    }
}

/// Claims whose answers change nothing, and consumes of keys already done: what an application
/// is told about each of them, fences and times included (they are data).
fn answers(db: &mut Client) -> Vec<String> {
    let claims = [
        ("t1", "done", "h"),
        ("t1", "done", "other"),
        ("t2", "done2", "h"),
        ("t1", "failed", "h"),
        ("t1", "failed", "other"),
        ("t1", "held", "h"),
        ("t1", "held", "other"),
        ("t1", "m1", ""),
        ("t1", "m1", "h"),
        ("t2", "m3", ""),
    ];
    let consumes = [
        ("t1", "done"),
        ("t2", "done2"),
        ("t1", "failed"),
        ("t1", "m1"),
        ("t1", "m2"),
        ("t2", "m3"),
        ("t2", "m4"),
    ];
    let mut out = Vec::new();
    for (tenant, key, hash) in claims {
        let row = db
            .query_one(
                "SELECT ROW(c.outcome, c.fence, c.attempt, c.response_code, c.response_body, \
                            c.lease_expires_at, c.expires_at, c.checkpoint_phase, \
                            c.checkpoint_data)::text \
                   FROM idem_claim($1, $2, $3) AS c",
                &[&tenant, &key, &hash],
            )
            .unwrap_or_else(|e| panic!("claim {tenant}/{key} {hash}: {e:?}"));
        out.push(format!(
            "idem_claim({tenant}, {key}, {hash:?}) = {}",
            row.get::<_, String>(0)
        ));
    }
    for (tenant, key) in consumes {
        let row = db
            .query_one("SELECT idem_consume($1, $2)", &[&tenant, &key])
            .unwrap_or_else(|e| panic!("consume {tenant}/{key}: {e:?}"));
        let new: bool = row.get(0);
        assert!(!new, "idem_consume({tenant}, {key}): already done");
        out.push(format!("idem_consume({tenant}, {key}) = {new}"));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The moves, as the module documentation writes them
// ---------------------------------------------------------------------------------------------

/// pg_idem's rows only (step 3).
fn move_rows(source: &Side, target: &Side) {
    copy_rows(source, target);
    raise_floor(source, target);
}

/// Step 3's dump and restore of the rows.
fn copy_rows(source: &Side, target: &Side) {
    let rows = target.dir().join("idem-rows.sql");
    let rows = rows.to_string_lossy();
    let mut dump = source.conn(source.owner());
    dump.extend(
        [
            "--data-only",
            "--table=idem.*",
            "--exclude-table=idem.settings",
            "--exclude-table=idem.role_settings",
            "--exclude-table=idem.key_lock_secret",
            "--exclude-table=idem.fence_seq",
            "-f",
            &rows,
        ]
        .map(String::from),
    );
    let dump: Vec<&str> = dump.iter().map(String::as_str).collect();
    run_ok("pg_dump --data-only", source.run_bin("pg_dump", &dump));
    run_ok(
        "psql -f idem-rows.sql",
        target.psql(
            target.owner(),
            &["-X", "-q", "-1", "-v", "ON_ERROR_STOP=1", "-f", &rows],
        ),
    );
}

/// Step 3's fence floor: the target's sequence up to the source's, never down.
fn raise_floor(source: &Side, target: &Side) {
    let floor = run_ok(
        "the source's floor",
        source.psql(
            source.owner(),
            &[
                "-X",
                "-A",
                "-t",
                "-c",
                "SELECT last_value FROM idem.fence_seq",
            ],
        ),
    );
    let floor = floor.trim();
    assert!(
        !floor.is_empty() && floor.chars().all(|c| c.is_ascii_digit()),
        "the floor: {floor:?}"
    );
    run_ok(
        "setval",
        target.psql(
            target.owner(),
            &[
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                &format!(
                    "SELECT setval('idem.fence_seq', GREATEST(last_value, {floor})) FROM idem.fence_seq"
                ),
            ],
        ),
    );
}

/// A whole database, native -> pg_tle (registered, not created).
fn move_database_to_tle(source: &Side, target: &Side) {
    let file = target.dir().join("app.dump");
    let file = file.to_string_lossy();
    let mut dump = source.conn(source.owner());
    dump.extend(["-Fc", "-f", &file].map(String::from));
    let dump: Vec<&str> = dump.iter().map(String::as_str).collect();
    run_ok("pg_dump -Fc", source.run_bin("pg_dump", &dump));
    let mut restore = target.conn(target.owner());
    restore.extend(["--exit-on-error", &file].map(String::from));
    let restore: Vec<&str> = restore.iter().map(String::as_str).collect();
    run_ok("pg_restore", target.run_bin("pg_restore", &restore));
}

/// A whole database, pg_tle -> native (a database without pg_idem), pg_tle's entries and the
/// settings' rows left out of the restore's list.
fn move_database_from_tle(source: &Side, target: &Side) {
    let file = target.dir().join("app.dump");
    let list = target.dir().join("app.list");
    let (file, list) = (file.to_string_lossy(), list.to_string_lossy());
    let mut dump = source.conn(source.owner());
    dump.extend(["-Fc", "-f", &file].map(String::from));
    let dump: Vec<&str> = dump.iter().map(String::as_str).collect();
    run_ok("pg_dump -Fc", source.run_bin("pg_dump", &dump));
    let filter = format!(
        "set -o pipefail; '{}' -l '{file}' | grep -v -E ' pg_?tle( |$)|TABLE DATA idem (role_)?settings' > '{list}'",
        target.bin("pg_restore").display()
    );
    run_ok(
        "pg_restore -l | grep -v",
        as_server_user(Path::new("/bin/bash"))
            .args(["-c", &filter])
            .output()
            .expect("bash"),
    );
    let listed = std::fs::read_to_string(&*list).expect("the list");
    assert!(
        listed.contains("EXTENSION - pg_idem") && listed.contains("TABLE DATA idem keys"),
        "the list lost pg_idem:\n{listed}"
    );
    let mut restore = target.conn(target.owner());
    restore.extend(["--exit-on-error", "-L", &list, &file].map(String::from));
    let restore: Vec<&str> = restore.iter().map(String::as_str).collect();
    run_ok("pg_restore -L", target.run_bin("pg_restore", &restore));
}

// ---------------------------------------------------------------------------------------------
// The target
// ---------------------------------------------------------------------------------------------

/// A fence the target hands out: above every fence of the source.
fn assert_above(before: &Before, fence: i64, what: &str, target: &Side) {
    assert!(
        fence > before.max_fence(),
        "{}: {what} got fence {fence}, not above the source's {}",
        target.name(),
        before.max_fence()
    );
}

fn outcome_fence_attempt(
    db: &mut Client,
    tenant: &str,
    key: &str,
) -> (String, Option<i64>, Option<i32>) {
    let row = db
        .query_one(
            "SELECT outcome, fence, attempt FROM idem_claim($1, $2, 'h')",
            &[&tenant, &key],
        )
        .unwrap_or_else(|e| panic!("claim {tenant}/{key}: {e:?}"));
    (row.get(0), row.get(1), row.get(2))
}

/// Everything the source's keys were, the target's keys are; `floor_before`: the target's fence
/// floor before the move (a target in use keeps a higher one).
fn check_target(target: &Side, before: &Before, floor_before: i64) {
    let name = target.name();
    target.tenant_grants_on();
    let floor = target.floor();
    assert!(
        floor >= before.floor && floor >= floor_before,
        "{name}: fence floor {floor} after the move, below the source's {} or its own {floor_before}",
        before.floor
    );

    let mut db = target.user();
    assert_eq!(
        answers(&mut db),
        before.answers,
        "{name} answers otherwise than the source"
    );

    // the lease is still held, by the source's fence
    db.execute(
        "SELECT idem_checkpoint('t1', 'held', $1, 'shipped', '{\"parcel\": 1}')",
        &[&before.held],
    )
    .unwrap_or_else(|e| panic!("{name}: the source's fence checkpoints its key: {e:?}"));
    db.execute("SELECT idem_heartbeat('t1', 'held', $1)", &[&before.held])
        .unwrap_or_else(|e| panic!("{name}: the source's fence heartbeats its key: {e:?}"));
    let err = db
        .execute(
            "SELECT idem_complete('t1', 'held', $1, 200)",
            &[&before.stalled],
        )
        .expect_err("another key's fence must not complete t1/held");
    assert_eq!(sqlstate(&err), "55000", "{name}: {err:?}");
    let (outcome, _, _) = outcome_fence_attempt(&mut db, "t1", "held");
    assert_eq!(outcome, "in_progress", "{name}: t1/held is leased");
    db.execute(
        "SELECT idem_complete('t1', 'held', $1, 200, '{\"shipped\": true}')",
        &[&before.held],
    )
    .unwrap_or_else(|e| panic!("{name}: the source's fence completes its key: {e:?}"));
    let row = db
        .query_one(
            "SELECT outcome, response_code, response_body::text FROM idem_claim('t1', 'held', 'h')",
            &[],
        )
        .expect("claim t1/held");
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, Option<i32>>(1),
            row.get::<_, Option<String>>(2)
        ),
        (
            "completed".to_string(),
            Some(200),
            Some(r#"{"shipped": true}"#.to_string())
        ),
        "{name}: t1/held completed on the target"
    );

    // the stalled attempt is taken over, from its checkpoint, by a larger fence
    let wait = before
        .stalled_lease_ends
        .saturating_duration_since(Instant::now());
    std::thread::sleep(wait);
    let row = db
        .query_one(
            "SELECT outcome, fence, attempt, checkpoint_phase, checkpoint_data::text \
               FROM idem_claim('t1', 'stalled', 'h')",
            &[],
        )
        .expect("claim t1/stalled");
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, i32>(2),
            row.get::<_, Option<String>>(3),
            row.get::<_, Option<String>>(4)
        ),
        (
            "claimed".to_string(),
            2,
            Some("step-2".to_string()),
            Some(r#"{"n": 2}"#.to_string())
        ),
        "{name}: the takeover of t1/stalled"
    );
    assert_above(before, row.get(1), "the takeover of t1/stalled", target);
    let err = db
        .execute(
            "SELECT idem_complete('t1', 'stalled', $1, 200)",
            &[&before.stalled],
        )
        .expect_err("the stalled attempt's fence must be refused after the takeover");
    assert_eq!(sqlstate(&err), "55000", "{name}: {err:?}");

    // expired, released and new keys: first attempts, above every fence of the source
    for (tenant, key) in [
        ("t2", "gone"),
        ("t2", "brief"),
        ("t1", "released"),
        ("t1", "new"),
    ] {
        let (outcome, fence, attempt) = outcome_fence_attempt(&mut db, tenant, key);
        assert_eq!(
            (outcome.as_str(), attempt),
            ("claimed", Some(1)),
            "{name}: {tenant}/{key}"
        );
        assert_above(
            before,
            fence.expect("a claim's fence"),
            &format!("{tenant}/{key}"),
            target,
        );
    }
    for (key, new) in [("m-brief", true), ("m-new", true), ("m1", false)] {
        let got: bool = db
            .query_one("SELECT idem_consume('t1', $1)", &[&key])
            .expect("consume")
            .get(0);
        assert_eq!(got, new, "{name}: idem_consume(t1, {key})");
    }

    // the grants still draw the boundary
    let err = db
        .query_one("SELECT outcome FROM idem_claim('t3', 'k', 'h')", &[])
        .expect_err("app_user has no grant on t3");
    assert_eq!(sqlstate(&err), "42501", "{name}: {err:?}");
    let grants: Vec<String> = target.owner_client().column(
        "SELECT role::text || '/' || tenant FROM idem.tenant_grants ORDER BY 1",
        &[],
    );
    assert_eq!(grants, ["app_user/t1", "app_user/t2"], "{name}");

    if before.watermarks {
        check_watermarks(target, &mut db);
    }
}

fn check_watermarks(target: &Side, db: &mut Client) {
    let name = target.name();
    let readable = match db.query_one("SELECT idem_watermark('t1', 'partition-0')", &[]) {
        Ok(row) => {
            assert_eq!(row.get::<_, Option<i64>>(0), Some(1234), "{name}");
            true
        }
        Err(e) if sqlstate(&e) == "0A000" => {
            eprintln!("note: {name} has no idem_watermark yet (0A000): only the rows are checked");
            false
        }
        Err(e) => panic!("{name}: idem_watermark: {e:?}"),
    };
    let rows: Vec<String> = target.owner_client().column(
        "SELECT tenant || '/' || stream || '=' || watermark FROM idem.watermarks ORDER BY 1",
        &[],
    );
    assert_eq!(
        rows,
        ["t1/partition-0=1234", "t2/p1=7"],
        "{name}: idem.watermarks"
    );
    if readable {
        for (seq, expected) in [(1234_i64, "duplicate"), (1235, "new")] {
            let outcome: String = db
                .query_one(
                    "SELECT outcome FROM idem_claim_seq('t1', 'partition-0', $1)",
                    &[&seq],
                )
                .expect("idem_claim_seq")
                .get(0);
            assert_eq!(outcome, expected, "{name}: idem_claim_seq {seq}");
        }
    }
}

/// A target in use before the move: a key of its own, in progress, and the floor it set.
fn use_target(target: &Side) -> (i64, i64) {
    let mut db = target.user();
    let fence = claim_fence(&mut db, "t9", "own", "1 hour", "1 day");
    (fence, target.floor())
}

/// The target's own key is untouched by the move.
fn check_own_key(target: &Side, own: i64) {
    target.grant("t9");
    let mut db = target.user();
    db.execute("SELECT idem_complete('t9', 'own', $1, 200)", &[&own])
        .unwrap_or_else(|e| panic!("{}: the target's own key: {e:?}", target.name()));
}

/// The data path (pg_idem's rows only) from `source` to `target`, the target in use before.
fn rows_move(source: &Side, target: &Side) {
    let before = populate(source, false);
    let (own, floor_before) = use_target(target);
    move_rows(source, target);
    check_target(target, &before, floor_before);
    check_own_key(target, own);
}

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

#[test]
fn native_to_the_plain_sql_edition() {
    let source = Side::native(Install::Installed);
    let target = Side::plain();
    rows_move(&source, &target);
}

#[test]
fn native_to_the_sql_edition_through_pg_tle() {
    let source = Side::native(Install::Installed);
    let Some(target) = Side::tle(Install::Installed) else {
        return;
    };
    rows_move(&source, &target);
}

#[test]
fn the_plain_sql_edition_to_native() {
    let source = Side::plain();
    let target = Side::native(Install::Installed);
    rows_move(&source, &target);
}

#[test]
fn the_sql_edition_through_pg_tle_to_native() {
    let Some(source) = Side::tle(Install::Installed) else {
        return;
    };
    let target = Side::native(Install::Installed);
    rows_move(&source, &target);
}

/// The whole database, the application's tables with it, into a managed-style server where
/// pg_idem is registered with pg_tle: restored by app_admin, no superuser.
#[test]
fn a_whole_native_database_to_pg_tle() {
    let source = Side::native(Install::Installed);
    let Some(target) = Side::tle(Install::Bare) else {
        return;
    };
    let before = populate(&source, true);
    move_database_to_tle(&source, &target);
    check_target(&target, &before, 0);
    let amount: String = target
        .user()
        .query_one(
            "SELECT amount::text FROM public.orders WHERE key = 'done'",
            &[],
        )
        .expect("the business row moved with its key")
        .get(0);
    assert_eq!(amount, "99.90");
}

/// The whole database of a managed-style server, pg_tle and the settings left out, into a new
/// database of a native server.
#[test]
fn a_whole_pg_tle_database_to_native() {
    let Some(source) = Side::tle(Install::Installed) else {
        return;
    };
    let target = Side::native(Install::Bare);
    let before = populate(&source, true);
    move_database_from_tle(&source, &target);
    check_target(&target, &before, 0);
    let amount: String = target
        .user()
        .query_one(
            "SELECT amount::text FROM public.orders WHERE key = 'done'",
            &[],
        )
        .expect("the business row moved with its key")
        .get(0);
    assert_eq!(amount, "99.90");
}

/// Why the rows are dumped with `--table='idem.*'`: natively (as through pg_tle) idem's tables
/// belong to the extension, and `--schema=idem` dumps none of their rows.
#[test]
fn schema_idem_dumps_no_row_of_the_extension() {
    let source = Side::native(Install::Installed);
    let mut db = source.user();
    claim_fence(&mut db, "t1", "k", "1 minute", "1 day");
    let dump = |pattern: &str| {
        let mut args = source.conn("postgres");
        args.extend(["--data-only".to_string(), pattern.to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_ok("pg_dump", source.run_bin("pg_dump", &args))
    };
    assert!(!dump("--schema=idem").contains("COPY idem.keys"));
    assert!(dump("--table=idem.*").contains("COPY idem.keys"));
}

// ---------------------------------------------------------------------------------------------
// Found by these moves: two fixed in the SQL edition; two of the native edition's, one fixed
// (grants restored by COPY), one ignored until fixed (run with --ignored), with the workaround
// docs/editions.md gives
// ---------------------------------------------------------------------------------------------

/// A pg_tle database restored whole into another (RDS to RDS, or a dump kept as a backup)
/// keeps the owner's settings: idem.settings holds only what the owner changed, so the dump's
/// COPY of it does not collide with rows CREATE EXTENSION made (it once inserted defaults, and
/// the restore lost the settings among pg_restore's harmless pg_tle errors: tenant_grants off
/// again, the tenant boundary gone, silently).
#[test]
fn a_whole_pg_tle_database_to_pg_tle_keeps_the_owners_settings() {
    let Some(source) = Side::tle(Install::Installed) else {
        return;
    };
    let Some(target) = Side::tle(Install::Nothing) else {
        return;
    };
    populate(&source, false);
    let file = target.dir().join("app.dump");
    let file = file.to_string_lossy();
    let mut dump = source.conn(ADMIN);
    dump.extend(["-Fc", "-f", &file].map(String::from));
    let dump: Vec<&str> = dump.iter().map(String::as_str).collect();
    run_ok("pg_dump -Fc", source.run_bin("pg_dump", &dump));
    let mut restore = target.conn(ADMIN);
    restore.push(file.to_string());
    let restore: Vec<&str> = restore.iter().map(String::as_str).collect();
    // errors expected: "schema pgtle already exists", "must be owner of extension pg_tle"
    let out = target.run_bin("pg_restore", &restore);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let keys = |side: &Side| -> i64 {
        side.owner_client()
            .query_one("SELECT count(*) FROM idem.keys", &[])
            .expect("count keys")
            .get(0)
    };
    assert_eq!(keys(&target), keys(&source), "{stderr}");
    let setting: String = target
        .owner_client()
        .query_one(
            "SELECT value FROM idem.settings WHERE name = 'pg_idem.tenant_grants'",
            &[],
        )
        .expect("the setting")
        .get(0);
    assert_eq!(setting, "on", "the owner's setting was lost:\n{stderr}");
    let err = target
        .user()
        .query_one("SELECT outcome FROM idem_claim('t3', 'k', 'h')", &[])
        .expect_err("app_user has no grant on t3");
    assert_eq!(sqlstate(&err), "42501");
}

/// Natively a backend caches its answers to "may this role act on this tenant": rows restored
/// into idem.tenant_grants (COPY) count in a session that asked before, such as a pooled
/// connection opened before the move, and a grant deleted by hand stops counting there (the
/// table's statement trigger announces every write, src/sql_api/tenants.rs), as does one
/// restored with the triggers disabled (pg_restore --disable-triggers: its ENABLE TRIGGER
/// announces it).
#[test]
fn grants_restored_into_a_running_native_database_count_in_open_sessions() {
    let source = Side::plain();
    let target = Side::native(Install::Installed);
    populate(&source, false);
    target.tenant_grants_on();
    let mut early = target.user();
    let err = early
        .query_one("SELECT outcome FROM idem_claim('t1', 'early', 'h')", &[])
        .expect_err("no grant on t1 before the move");
    assert_eq!(sqlstate(&err), "42501");
    move_rows(&source, &target);
    let (outcome, _, _) = outcome_fence_attempt(&mut target.user(), "t1", "fresh");
    assert_eq!(outcome, "claimed", "a new session sees the restored grant");
    let outcome = early
        .query_one("SELECT outcome FROM idem_claim('t1', 'early', 'h')", &[])
        .map(|row| row.get::<_, String>(0))
        .unwrap_or_else(|e| format!("{e:?}"));
    assert_eq!(
        outcome, "claimed",
        "a session opened before the move must see the restored grant"
    );
    let claim = |db: &mut Client, key: &str| {
        db.query_one(
            &format!("SELECT outcome FROM idem_claim('t1', '{key}', 'h')"),
            &[],
        )
        .map(|row| row.get::<_, String>(0))
        .unwrap_or_else(|e| sqlstate(&e).to_string())
    };
    target
        .owner_client()
        .batch_execute("DELETE FROM idem.tenant_grants WHERE tenant = 't1'")
        .expect("delete the grant by hand");
    assert_eq!(
        claim(&mut early, "after-delete"),
        "42501",
        "a grant deleted by hand must stop counting in an open session"
    );
    // pg_restore --disable-triggers: the rows go in without the trigger, and the ENABLE
    // TRIGGER that follows announces them
    target
        .owner_client()
        .batch_execute(&format!(
            "BEGIN; ALTER TABLE idem.tenant_grants DISABLE TRIGGER ALL; \
             INSERT INTO idem.tenant_grants VALUES ('{USER}', 't1'); \
             ALTER TABLE idem.tenant_grants ENABLE TRIGGER ALL; COMMIT"
        ))
        .expect("a restore with the triggers disabled");
    assert_eq!(claim(&mut early, "after-disabled-restore"), "claimed");
}

/// A takeover's fence is above the fence it replaces, whatever the sequence says, in both
/// editions (natively `fences::next`: max(nextval, replaced + 1) without the preload, the clock
/// with it): after a move of the rows without step 3's floor (or any restore of idem.keys
/// without the sequence), the SQL edition raises the sequence above the fence it replaces.
#[test]
fn a_sql_edition_takeover_is_above_the_fence_it_replaces_without_the_floor() {
    let source = Side::native(Install::Installed);
    let target = Side::plain();
    let before = populate(&source, false);
    copy_rows(&source, &target);
    target.tenant_grants_on();
    std::thread::sleep(
        before
            .stalled_lease_ends
            .saturating_duration_since(Instant::now()),
    );
    let (outcome, fence, attempt) = outcome_fence_attempt(&mut target.user(), "t1", "stalled");
    assert_eq!((outcome.as_str(), attempt), ("claimed", Some(2)));
    let fence = fence.expect("a claim's fence");
    assert!(
        fence > before.stalled,
        "the takeover's fence {fence} is not above the one it replaces, {}",
        before.stalled
    );
}

/// Natively the fence counter is lifted to the floor in idem.fence_seq once per server
/// lifetime, at a database's first fence (src/store/fences.rs `lift`); a floor raised later by
/// a restore (step 3's setval) is read again only when the counter passes the floor it knew,
/// and then only as the floor, never lifting the counter. A native target that handed out
/// fences before the move would keep handing out its clock's, below restored fences that are
/// ahead of that clock: those of a SQL edition that came from a native server less than a
/// minute before (its fences start at that server's floor, a minute of clock ahead), as in
/// this rehearsal there and back, or of a source whose clock is ahead. The restore's COPY
/// fires pg_idem's trigger `lift_fence_clock` on idem.keys, which lifts the counter to each
/// fence it writes. (Takeovers of restored keys were never affected: above the fence they
/// replace.)
#[test]
fn a_native_target_in_use_hands_out_fences_above_restored_ones() {
    let first = Side::native(Install::Installed);
    let sql = Side::plain();
    let back = Side::native(Install::Installed);
    let a = claim_fence(&mut first.user(), "t1", "a", "1 minute", "1 day");
    move_rows(&first, &sql);
    let b = claim_fence(&mut sql.user(), "t1", "b", "1 minute", "1 day");
    assert!(
        b > a,
        "the SQL edition's fence {b} above the native one {a}"
    );
    // the native target in use before the move
    claim_fence(&mut back.user(), "t9", "own", "1 minute", "1 day");
    move_rows(&sql, &back);
    let c = claim_fence(&mut back.user(), "t1", "c", "1 minute", "1 day");
    assert!(
        c > b,
        "the native target's new fence {c} is not above the restored {b} (floor {})",
        back.floor()
    );
}
