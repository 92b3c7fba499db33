//! The PostgreSQL under test: its binaries, version and template data directory, and
//! running its programs as the server's OS user.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::AtomicUsize;
use std::sync::OnceLock;

use crate::*;

/// Where test servers live: world-traversable, so the `postgres` user reaches its data dirs.
pub(crate) const ROOT: &str = "/tmp/pg_idem_tests";

pub(crate) static COUNTER: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn running_as_root() -> bool {
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

pub(crate) fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    succeeded(what, out)
}

/// `out`, what the program `what` printed, when it exited successfully; otherwise a panic with
/// its exit status, stdout and stderr.
pub fn succeeded(what: &str, out: Output) -> Output {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// initdb of the PostgreSQL in `bindir`, as the server's OS user, with what every test cluster
/// has: trust authentication, `postgres` the bootstrap superuser, UTF8 and the C.UTF-8 locale.
/// The caller adds `-D` and its directory (and anything else).
pub fn initdb_command(bindir: &Path) -> Command {
    let mut cmd = as_server_user(&bindir.join("initdb"));
    cmd.args([
        "-A",
        "trust",
        "-U",
        "postgres",
        "-E",
        "UTF8",
        "--locale=C.UTF-8",
    ]);
    cmd
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
            if edition() == Edition::Sql && !sql_on_pg_under_test() {
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

pub(crate) fn check_installed() {
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
pub(crate) fn template() -> &'static Path {
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
        let mut cmd = initdb_command(&bindir());
        cmd.arg("-D").arg(&building);
        run_ok(&mut cmd, "initdb");
        if std::fs::rename(&building, &template).is_err() {
            // another test process got there first
            let _ = std::fs::remove_dir_all(&building);
        }
        template
    })
}
