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
//!    - SQL edition, plain: `psql DST -U owner -X -1 -v ON_ERROR_STOP=1 -f pg_idem--0.6.0.sql`
//!    - SQL edition, pg_tle: `psql DST -U owner -X -v ON_ERROR_STOP=1 -f pg_idem--0.6.0.tle.sql`
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
//! (`psql DST -U owner -X -v ON_ERROR_STOP=1 -f pg_idem--0.6.0.tle.sql`) and the roles in
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
use pg_idem_tests::{
    as_server_user, bindir, major, sqlstate, succeeded, Client, Column, NoTls, Server,
};

mod directions;
mod found;
mod moving;

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
    String::from_utf8_lossy(&succeeded(what, out).stdout).into_owned()
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
