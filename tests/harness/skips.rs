//! Tests that need what a machine may not have.

/// Called by a test that cannot run here because `dependency` is missing, right before it
/// returns without checking anything; `reason` says what is missing and how to get it. The
/// dependencies: `citus` (tests/cluster/citus/), `faketime` (the clock tests of
/// tests/cluster/failover.rs), `prlimit` (a backend's memory limit in tests/attacks/hardening.rs),
/// `pg_upgrade` (the two bin directories tests/operations/pg_upgrade.rs needs), `pg_tle` (the
/// managed-style servers of tests/harness/managed.rs), `debug-build` (the 256 fence slots of a
/// debug build, tests/behaviour/fence_tokens.rs), `native edition` (a test of what only the native
/// engine has, run under `PG_IDEM_EDITION=sql`: see [`native_only`]).
///
/// cargo counts such a test as passed, so the skip is recorded where the test command counts
/// it: a line `SKIPPED: <suite>::<test>: <reason>` on stderr (shown with --nocapture) and
/// appended to the file `PG_IDEM_SKIP_LOG` names, if set (scripts/test.sh sets it per step,
/// counts its lines as skipped and takes them off the step's passed). When `PG_IDEM_REQUIRE`
/// (names separated by commas) names `dependency`, the test fails instead: scripts/test.sh names
/// there what it installs itself (faketime from setup.sh, Citus where ../shared/citus exists),
/// so a missing one is a fault of the machine, not a reason to skip.
pub fn skip_test(dependency: &str, reason: &str) {
    let required = std::env::var("PG_IDEM_REQUIRE").unwrap_or_default();
    if required.split(',').any(|name| name.trim() == dependency) {
        panic!("{dependency} is missing, and PG_IDEM_REQUIRE says this test must run: {reason}");
    }
    // libtest names each test's thread after the test; the binary is `<suite>-<hash>`
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    let suite = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((suite, _hash)) => suite.to_string(),
            None => stem,
        })
        .unwrap_or_default();
    let reason = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = format!("SKIPPED: {suite}::{test}: {reason}\n");
    eprint!("{line}");
    if let Ok(log) = std::env::var("PG_IDEM_SKIP_LOG") {
        use std::io::Write;
        // one write per line, in append mode: lines of tests running at once stay whole
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut file| file.write_all(line.as_bytes()))
            .unwrap_or_else(|e| panic!("PG_IDEM_SKIP_LOG {log}: {e}"));
    }
}
