//! Many real clients hammer a thousand keys across tenants, mostly duplicates, in both usage
//! modes; afterwards every invariant of pg_idem is checked against the database and against what
//! the clients saw (see harness/workload.rs).

use std::sync::atomic::Ordering;

use pg_idem_tests::workload::{self, Config, Mode};
use pg_idem_tests::Server;

fn run_mode(mode: Mode) -> workload::Report {
    let server = Server::start(&[]);
    workload::prepare(&mut server.client());
    let report = workload::run(&server.conninfo("postgres"), mode, &Config::default(), None);
    println!("{report}");
    report
}

fn assert_common(report: &workload::Report) {
    let c = &report.counters;
    let requests = c.requests.load(Ordering::Relaxed);
    assert!(requests >= 3000, "only {requests} requests ran");
    let duplicates = c.duplicates.load(Ordering::Relaxed);
    assert!(
        duplicates * 2 >= requests,
        "only {duplicates} of {requests} requests were duplicates"
    );
    assert!(
        c.in_progress.load(Ordering::Relaxed) > 0,
        "no request ever met another in flight"
    );
    assert!(
        c.replayed.load(Ordering::Relaxed) > 0,
        "nothing was replayed"
    );
    assert_eq!(
        c.unexpected_errors.load(Ordering::Relaxed),
        0,
        "unexpected errors (see stderr)"
    );
    assert!(
        report.violations.is_empty(),
        "invariants violated:\n{}",
        report.violations.join("\n")
    );
}

#[test]
fn one_transaction_mode_holds_its_invariants() {
    let report = run_mode(Mode::OneTransaction);
    assert_common(&report);
    assert!(
        report.counters.rolled_back.load(Ordering::Relaxed) > 0,
        "no rollback was exercised"
    );
}

#[test]
fn lease_mode_holds_its_invariants() {
    let report = run_mode(Mode::Lease);
    assert_common(&report);
    let c = &report.counters;
    assert!(
        c.stalls.load(Ordering::Relaxed) > 0,
        "no worker stalled past its lease"
    );
    assert!(
        c.takeovers.load(Ordering::Relaxed) > 0,
        "no expired lease was taken over"
    );
    assert!(
        c.stale_refused.load(Ordering::Relaxed) > 0,
        "no stale fence was exercised"
    );
}
