//! The released versions, for upgrade tests: the oldest one's install script, and the released
//! 0.5.0 (its commit, and its SQL edition frozen under tests/sql_edition/released/).

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

/// The released 0.5.0: the tree at this commit. Its install and update scripts never change
/// (0.6.0 holds what changed after it); the SQL edition's updates start from it.
pub const RELEASE_0_5_0: (&str, &str) = ("0.5.0", "ef35c4890518e9c3e2ffbccf623e6c994f240afe");

/// The SQL edition of the released 0.5.0 as its commit's scripts/sql_edition.py generated it,
/// frozen in tests/sql_edition/released/ (their README says how they were made; the suite
/// sql_edition_updates checks them against that generation): (plain install, pg_tle package).
pub fn released_sql_edition_0_5_0() -> (String, String) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sql_edition/released");
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("tests/sql_edition/released/{name}: {e}"))
    };
    (read("pg_idem--0.5.0.sql"), read("pg_idem--0.5.0.tle.sql"))
}

/// The source tree of `commit`, unpacked into a new directory under `into` with `git archive`
/// (from the repository this test runs in), or why it cannot be: git missing, or a clone
/// without that commit (a shallow one). The caller skips its test then (`skip_test`).
pub fn git_tree_at(commit: &str, into: &std::path::Path) -> Result<PathBuf, String> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = into.join(format!("tree-{}", &commit[..12.min(commit.len())]));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let archive = Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["archive", "--format=tar", commit])
        .output()
        .map_err(|e| format!("git: {e}"))?;
    if !archive.status.success() {
        return Err(format!(
            "git archive {commit}: {}",
            String::from_utf8_lossy(&archive.stderr).trim()
        ));
    }
    let mut tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&dir)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("tar: {e}"))?;
    use std::io::Write;
    tar.stdin
        .take()
        .expect("tar's stdin")
        .write_all(&archive.stdout)
        .map_err(|e| format!("tar: {e}"))?;
    let status = tar.wait().map_err(|e| format!("tar: {e}"))?;
    if !status.success() {
        return Err(format!("tar -x of {commit} failed"));
    }
    Ok(dir)
}
