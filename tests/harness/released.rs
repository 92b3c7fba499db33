//! The oldest released version's install script, for upgrade tests.

use std::path::PathBuf;
use std::process::Command;

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
