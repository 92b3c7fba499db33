//! Failover and crash recovery, through real connections (issue 22, part 2).
//!
//! 0.3.0 handed out fences again after a failover: a standby promoted after the primary stopped
//! (immediate) gave new claims fences the old primary had already handed out to claims whose
//! transactions had not committed yet, because the fence sequence's advance was never flushed.
//! Here several sessions hold fences in transactions left open while others commit claims, the
//! server goes away without a shutdown checkpoint (`pg_ctl stop -m immediate`), and then a
//! standby is promoted or the same server goes through crash recovery. Every fence handed out
//! afterwards (to new keys, to the keys that were in flight, to takeovers of stalled leases) must
//! be strictly above every fence handed out before, committed or not; committed completed keys
//! replay their response, nothing of the open transactions is there, and amcheck finds pg_idem's
//! tables and indexes consistent on the server that survived.
//!
//! A fence is above both a floor flushed to WAL and the clock (src/store/fences.rs), so one
//! machine's shared clock would hide a missing floor. The scenarios take the terms apart:
//! - a synchronous standby, and crash recovery: both terms;
//! - an asynchronous standby cut off before the first claim: no floor reaches it, the clock alone;
//! - a standby, and a restarted server, with the clock ten minutes back (libfaketime): the floor
//!   alone; and a crash milliseconds after the only claims, with the WAL writer held back: the
//!   floor must have been flushed by the claim itself.
//!
//! And on a running hot standby: replays answer as on the primary, new claims and writes get
//! 25006, the purge worker leaves expired keys alone without a word in the log; once promoted it
//! purges them.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use pg_idem_tests::*;

const TENANT: &str = "t";
const HASH: &str = "h";

/// What a primary needs for a streaming standby (15's defaults, spelt out).
const REPLICATION: &[&str] = &["wal_level = replica", "max_wal_senders = 10"];

/// Makes `standby_name` the synchronous standby of `primary` and waits until it is one.
fn make_synchronous(primary: &Server, standby_name: &str) {
    primary.write_conf(&[format!("synchronous_standby_names = '{standby_name}'")]);
    primary.reload();
    let mut db = primary.client();
    wait_for(
        "the standby to stream synchronously",
        Duration::from_secs(60),
        || {
            db.query_one(
                "SELECT count(*) FROM pg_stat_replication \
                  WHERE application_name = $1 AND state = 'streaming' AND sync_state = 'sync'",
                &[&standby_name],
            )
            .map(|r| r.get::<_, i64>(0) == 1)
            .unwrap_or(false)
        },
    );
}

/// A key completed before the failure, with the response a replay must give back.
struct Completed {
    key: String,
    code: i32,
    body: String,
}

/// Everything handed out before the failure.
#[derive(Default)]
struct Before {
    /// every fence handed out: committed claims, open transactions' claims, stalled leases
    fences: Vec<i64>,
    completed: Vec<Completed>,
    /// keys claimed in transactions that were still open when the server went away
    in_flight: Vec<String>,
    /// keys claimed and committed with a short lease, never completed
    stalled: Vec<(String, i64)>,
    /// sessions whose transactions are still open (dropped after the server is gone)
    open_sessions: Vec<Client>,
}

impl Before {
    fn max_fence(&self) -> i64 {
        *self.fences.iter().max().expect("fences were handed out")
    }
}

/// For `run_for`: `committers` sessions claim, complete and commit keys one transaction each;
/// `holders` sessions open a transaction and keep claiming keys in it (one through
/// `idem_claim_many`), reading every fence, and never commit. Each holder claims once more at
/// the end, the last thing before this returns, with their transactions still open. Before all
/// that, `stalled` keys are claimed and committed with a lease of `stalled_lease`.
fn hand_out_fences(
    server: &Server,
    committers: usize,
    holders: usize,
    stalled: usize,
    stalled_lease: &str,
    run_for: Duration,
) -> Before {
    let mut before = Before::default();
    let mut db = server.client();
    for i in 0..stalled {
        let key = format!("stalled-{i}");
        let c = claim_with(&mut db, TENANT, &key, HASH, stalled_lease, None);
        assert_eq!(c.outcome, "claimed");
        before.fences.push(c.fence.unwrap());
        before.stalled.push((key, c.fence.unwrap()));
    }
    let stop = AtomicBool::new(false);
    thread::scope(|scope| {
        let committing: Vec<_> = (0..committers)
            .map(|w| {
                let stop = &stop;
                scope.spawn(move || {
                    let mut db = server.client();
                    let mut fences = Vec::new();
                    let mut completed = Vec::new();
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("committed-{w}-{i}");
                        let body = format!(r#"{{"n": {i}, "worker": {w}}}"#);
                        let mut tx = db.transaction().unwrap();
                        let c = claim(&mut tx, TENANT, &key, HASH);
                        assert_eq!(c.outcome, "claimed", "{key}");
                        let fence = c.fence.unwrap();
                        complete(&mut tx, TENANT, &key, fence, 201, &body);
                        tx.commit().unwrap();
                        fences.push(fence);
                        completed.push(Completed {
                            key,
                            code: 201,
                            body,
                        });
                        i += 1;
                    }
                    (fences, completed)
                })
            })
            .collect();
        let holding: Vec<_> = (0..holders)
            .map(|h| {
                let stop = &stop;
                scope.spawn(move || {
                    let mut db = server.client();
                    db.batch_execute("BEGIN").unwrap();
                    let mut fences = Vec::new();
                    let mut keys = Vec::new();
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        if h == 0 {
                            // a batch claim of three keys
                            let batch: Vec<String> =
                                (0..3).map(|j| format!("open-{h}-{i}-{j}")).collect();
                            let hashes = vec![HASH; batch.len()];
                            for row in db
                                .query(
                                    "SELECT key, outcome, fence FROM idem_claim_many($1, $2, $3)",
                                    &[&TENANT, &batch, &hashes],
                                )
                                .unwrap()
                            {
                                let outcome: String = row.get(1);
                                assert_eq!(outcome, "claimed");
                                keys.push(row.get::<_, String>(0));
                                fences.push(row.get::<_, i64>(2));
                            }
                        } else {
                            let key = format!("open-{h}-{i}");
                            let c = claim(&mut db, TENANT, &key, HASH);
                            assert_eq!(c.outcome, "claimed", "{key}");
                            fences.push(c.fence.unwrap());
                            keys.push(key);
                        }
                        i += 1;
                        thread::sleep(Duration::from_millis(5));
                    }
                    (db, fences, keys)
                })
            })
            .collect();
        thread::sleep(run_for);
        stop.store(true, Ordering::Relaxed);
        for c in committing {
            let (fences, completed) = c.join().unwrap();
            before.fences.extend(fences);
            before.completed.extend(completed);
        }
        for h in holding {
            let (db, fences, keys) = h.join().unwrap();
            before.fences.extend(fences);
            before.in_flight.extend(keys);
            before.open_sessions.push(db);
        }
    });
    // the open transactions claim once more, the very last thing before the failure
    for (h, db) in before.open_sessions.iter_mut().enumerate() {
        let key = format!("open-{h}-last");
        let c = claim(db, TENANT, &key, HASH);
        assert_eq!(c.outcome, "claimed", "{key}");
        before.fences.push(c.fence.unwrap());
        before.in_flight.push(key);
    }
    let distinct: HashSet<i64> = before.fences.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        before.fences.len(),
        "a fence was handed out twice before the failure"
    );
    assert!(before.completed.len() >= 10 && before.in_flight.len() >= 10);
    before
}

/// What reached the surviving server of what the failed one wrote.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Wal {
    /// everything committed (a synchronous standby, or crash recovery)
    Kept,
    /// nothing since the standby was cut off, before the first claim: neither the keys nor any
    /// floor of the fence sequence (an asynchronous standby that lagged)
    Lost,
}

/// What the surviving server does with everything handed out before: new fences strictly
/// above all of them (new keys, the keys that were in flight, takeovers of the stalled leases),
/// committed keys replayed, nothing of the open transactions left. Returns the fences it drew.
fn check_after(server: &Server, before: &Before, wal: Wal, what: &str) -> Vec<i64> {
    let max_before = before.max_fence();
    let min_before = *before.fences.iter().min().unwrap();
    let mut db = server.client();
    let floor: i64 = db
        .query_one("SELECT last_value FROM idem.fence_seq", &[])
        .unwrap()
        .get(0);

    // nothing of the transactions that were open is there
    let in_flight_rows: i64 = db
        .query_one(
            "SELECT count(*) FROM idem.keys WHERE tenant = $1 AND key = ANY($2)",
            &[&TENANT, &before.in_flight],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        in_flight_rows, 0,
        "{what}: claims of transactions that never committed are back"
    );

    // keys claimed again: the keys that were in flight, and those lost with the WAL
    let mut again = before.in_flight.clone();
    match wal {
        Wal::Kept => {
            // every committed completed key replays with its response
            for c in &before.completed {
                let r = claim(&mut db, TENANT, &c.key, HASH);
                assert_eq!(
                    (
                        r.outcome.as_str(),
                        r.fence,
                        r.response_code,
                        r.response_body.as_deref()
                    ),
                    ("completed", None, Some(c.code), Some(c.body.as_str())),
                    "{what}: the replay of {}",
                    c.key
                );
            }
            let other = claim(&mut db, TENANT, &before.completed[0].key, "another hash");
            assert_eq!(other.outcome, "mismatch");
        }
        Wal::Lost => {
            // what this scenario is about: no key and no floor of the old primary got here, so
            // only the clock can keep the fences apart
            let keys: i64 = db
                .query_one("SELECT count(*) FROM idem.keys", &[])
                .unwrap()
                .get(0);
            assert_eq!(keys, 0, "{what}: the standby was cut off before any claim");
            assert!(
                floor < min_before,
                "{what}: the floor ({floor}) reached the standby"
            );
            again.extend(before.completed.iter().map(|c| c.key.clone()));
            again.extend(before.stalled.iter().map(|(k, _)| k.clone()));
        }
    }

    // new fences from several sessions at once: the keys that were in flight, and new keys
    let sessions = 4;
    let started = Instant::now();
    let mut after: Vec<i64> = thread::scope(|scope| {
        let handles: Vec<_> = (0..sessions)
            .map(|s| {
                let again = &again;
                scope.spawn(move || {
                    let mut db = server.client();
                    let mut fences = Vec::new();
                    let mine = again.iter().skip(s).step_by(sessions);
                    let new = (0..20).map(|i| format!("after-{s}-{i}"));
                    for key in mine.cloned().chain(new) {
                        let c = claim(&mut db, TENANT, &key, HASH);
                        assert_eq!(c.outcome, "claimed", "{what}: {key}");
                        assert_eq!(c.attempt, Some(1), "{what}: {key}");
                        let fence = c.fence.unwrap();
                        assert!(
                            fence > max_before,
                            "{what}: {key} got fence {fence}, handed out before the failure \
                             already (fences up to {max_before} were)"
                        );
                        fences.push(fence);
                    }
                    fences
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });

    // the stalled leases are taken over once they pass, with a larger fence than all before
    let stalled = if wal == Wal::Kept {
        before.stalled.as_slice()
    } else {
        &[]
    };
    if !stalled.is_empty() {
        let left: f64 = db
            .query_one(
                "SELECT extract(epoch FROM max(lease_expires_at) - clock_timestamp())::float8 \
                   FROM idem.keys WHERE tenant = $1 AND key LIKE 'stalled-%'",
                &[&TENANT],
            )
            .unwrap()
            .get(0);
        assert!(left < 10.0, "{what}: the stalled leases end in {left} s");
        if left > 0.0 {
            thread::sleep(Duration::from_secs_f64(left + 0.1));
        }
    }
    for (key, old) in stalled {
        let c = claim(&mut db, TENANT, key, HASH);
        assert_eq!(
            (c.outcome.as_str(), c.attempt),
            ("claimed", Some(2)),
            "{what}: the takeover of {key}"
        );
        let fence = c.fence.unwrap();
        assert!(
            fence > max_before && fence > *old,
            "{what}: the takeover of {key} got fence {fence}; fences up to {max_before} were \
             handed out before the failure"
        );
        after.push(fence);
    }

    let distinct: HashSet<i64> = after.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        after.len(),
        "{what}: a fence handed out twice"
    );
    let min_after = *after.iter().min().unwrap();
    println!(
        "{what}: {} fences before ({} committed and completed, {} in open transactions, {} \
         stalled leases), the largest {max_before}; idem.fence_seq (the floor) on the surviving \
         server {floor} ({:+} above that); {} fences after in {:.2}s, the smallest {min_after} \
         ({:+} µs above the largest before)",
        before.fences.len(),
        before.completed.len(),
        before.in_flight.len(),
        before.stalled.len(),
        floor - max_before,
        after.len(),
        started.elapsed().as_secs_f64(),
        min_after - max_before,
    );
    amcheck(&mut db);
    after
}

#[test]
fn a_promoted_standby_hands_out_no_fence_twice() {
    let primary = Server::start(REPLICATION);
    let standby = primary.standby("standby1", &[]);
    make_synchronous(&primary, "standby1");

    let mut before = hand_out_fences(&primary, 3, 4, 5, "1 s", Duration::from_secs(3));
    // the committed keys reached the synchronous standby with their commits (no waiting here:
    // what the open transactions wrote after the last commit may or may not have)
    let stopped = Instant::now();
    primary.stop("immediate");
    before.open_sessions.clear();
    let log = primary.log();
    assert!(
        log.contains("received immediate shutdown request")
            && !log.contains("checkpoint starting: shutdown"),
        "the primary must go away without a shutdown checkpoint:\n{log}"
    );

    let mut db = standby.client();
    let in_recovery: bool = db
        .query_one("SELECT pg_is_in_recovery()", &[])
        .unwrap()
        .get(0);
    assert!(in_recovery, "a standby until promoted");
    standby.promote();
    let in_recovery: bool = db
        .query_one("SELECT pg_is_in_recovery()", &[])
        .unwrap()
        .get(0);
    assert!(!in_recovery, "promoted");
    println!(
        "failover: primary stopped and standby promoted in {:.2}s",
        stopped.elapsed().as_secs_f64()
    );
    check_after(&standby, &before, Wal::Kept, "after failover");
}

#[test]
fn crash_recovery_hands_out_no_fence_twice() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let checkpointer = |db: &mut Client| -> i32 {
        db.query_one(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'",
            &[],
        )
        .unwrap()
        .get(0)
    };
    let checkpointer_before = checkpointer(&mut db);
    drop(db);
    const NOT_SHUT_DOWN: &str = "database system was not properly shut down";
    assert!(!server.log().contains(NOT_SHUT_DOWN));

    let mut before = hand_out_fences(&server, 3, 4, 5, "1 s", Duration::from_secs(3));
    server.stop("immediate");
    before.open_sessions.clear();
    server.start_again();

    let mut db = server.client();
    assert_ne!(
        checkpointer(&mut db),
        checkpointer_before,
        "a new checkpointer"
    );
    let log = server.log();
    assert_eq!(
        log.matches(NOT_SHUT_DOWN).count(),
        1,
        "the restart must go through crash recovery:\n{log}"
    );
    assert!(log.contains("redo starts at"), "WAL was replayed:\n{log}");
    check_after(&server, &before, Wal::Kept, "after crash recovery");
}

/// Cuts `standby` off its primary (its primary_conninfo then names a port nobody listens on)
/// and waits until the primary has no WAL sender for it.
fn cut_off(primary: &Server, standby: &Server, standby_name: &str) {
    let mut db = primary.client();
    let senders = |db: &mut Client| -> i64 {
        db.query_one(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1",
            &[&standby_name],
        )
        .unwrap()
        .get(0)
    };
    wait_for("the standby to stream", Duration::from_secs(60), || {
        senders(&mut db) == 1
    });
    standby.write_conf(&[format!(
        "primary_conninfo = 'host=127.0.0.1 port=1 user=postgres application_name={standby_name}'"
    )]);
    standby.reload();
    wait_for("the standby to be cut off", Duration::from_secs(60), || {
        senders(&mut db) == 0
    });
}

#[test]
fn an_asynchronous_standby_that_lost_the_wal_hands_out_no_fence_twice() {
    // the standby streams, then is cut off before the first claim: when it is promoted, none of
    // the old primary's keys and none of its floors are there, only its own clock
    let primary = Server::start(REPLICATION);
    let standby = primary.standby("standby1", &[]);
    cut_off(&primary, &standby, "standby1");
    let mut before = hand_out_fences(&primary, 3, 4, 5, "1 s", Duration::from_secs(3));
    primary.stop("immediate");
    before.open_sessions.clear();
    standby.promote();
    check_after(
        &standby,
        &before,
        Wal::Lost,
        "after failover to a standby that lost the WAL",
    );
}

/// libfaketime (Debian's `faketime` package), to give a server a clock of its own.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The environment that sets a server's clock ten minutes back (its monotonic clock is left
/// alone), or None (the test is recorded as skipped) when libfaketime is not installed.
fn clock_ten_minutes_back() -> Option<[(&'static str, &'static str); 3]> {
    if !std::path::Path::new(LIBFAKETIME).exists() {
        skip_test(
            "faketime",
            &format!(
                "{LIBFAKETIME} is missing (scripts/setup.sh installs it: apt-get install faketime)"
            ),
        );
        return None;
    }
    Some([
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME", "-10m"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ])
}

/// How many seconds `server`'s clock is behind this process's.
fn seconds_behind(server: &Server) -> f64 {
    let theirs: f64 = server
        .client()
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .unwrap()
        .get(0);
    let ours = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    ours - theirs
}

/// Starts `server` again, after an immediate stop, with its clock set back (`env` from
/// `clock_ten_minutes_back`); checks that the clock is behind and that the start went through
/// crash recovery. Returns how many seconds the clock is behind.
fn restart_with_the_clock_back(server: &Server, env: &[(&str, &str)]) -> f64 {
    server.start_again_with_env(env);
    let behind = seconds_behind(server);
    assert!(
        behind > 590.0,
        "the clock is {behind} s behind, not ten minutes"
    );
    assert_eq!(
        server
            .log()
            .matches("database system was not properly shut down")
            .count(),
        1,
        "crash recovery"
    );
    behind
}

#[test]
fn crash_recovery_with_the_clock_set_back_hands_out_no_fence_twice() {
    // the clock term cannot help here: only the floor in idem.fence_seq can
    let Some(env) = clock_ten_minutes_back() else {
        return;
    };
    let server = Server::start(&[]);
    let mut before = hand_out_fences(&server, 3, 4, 0, "1 s", Duration::from_secs(3));
    server.stop("immediate");
    before.open_sessions.clear();
    let behind = restart_with_the_clock_back(&server, &env);
    check_after(
        &server,
        &before,
        Wal::Kept,
        &format!("after crash recovery with the clock {behind:.0} s back"),
    );
}

#[test]
fn a_promoted_standby_with_its_clock_behind_hands_out_no_fence_twice() {
    // the standby had replayed all the WAL, so the floor is there; its clock is ten minutes
    // behind the primary's, so the clock term cannot help
    let Some(env) = clock_ten_minutes_back() else {
        return;
    };
    let primary = Server::start(REPLICATION);
    let standby = primary.standby("standby1", &[]);
    standby.stop("fast");
    standby.start_again_with_env(&env);
    make_synchronous(&primary, "standby1");
    let behind = seconds_behind(&standby);
    assert!(
        behind > 590.0,
        "the clock is {behind} s behind, not ten minutes"
    );
    let mut before = hand_out_fences(&primary, 3, 4, 0, "1 s", Duration::from_secs(3));
    standby.wait_for_replay(&mut primary.client(), Duration::from_secs(30));
    primary.stop("immediate");
    before.open_sessions.clear();
    standby.promote();
    check_after(
        &standby,
        &before,
        Wal::Kept,
        &format!("after failover to a standby whose clock is {behind:.0} s behind"),
    );
}

#[test]
fn a_crash_right_after_open_claims_keeps_their_floor() {
    // 0.3.0's local crash: the only WAL that says how far fences went is written by claims
    // whose transactions never commit, and the server stops a few milliseconds later. The WAL
    // writer, which would flush it within 200 ms anyway, is made to wait; the clock is set back
    // after the crash, so only the floor, flushed before the fence was handed out, can help.
    let Some(env) = clock_ten_minutes_back() else {
        return;
    };
    let server = Server::start(&["wal_writer_delay = '10s'"]);
    let mut sessions: Vec<Client> = (0..3).map(|_| server.client()).collect();
    let mut before = Vec::new();
    for (s, db) in sessions.iter_mut().enumerate() {
        db.batch_execute("BEGIN").unwrap();
        for i in 0..5 {
            let c = claim(db, TENANT, &format!("open-{s}-{i}"), HASH);
            assert_eq!(c.outcome, "claimed");
            before.push(c.fence.unwrap());
        }
    }
    server.stop("immediate");
    drop(sessions);
    let behind = restart_with_the_clock_back(&server, &env);
    let max_before = *before.iter().max().unwrap();
    let mut db = server.client();
    let keys: i64 = db
        .query_one("SELECT count(*) FROM idem.keys", &[])
        .unwrap()
        .get(0);
    assert_eq!(keys, 0, "nothing of the open transactions is there");
    for s in 0..3 {
        for i in 0..5 {
            let key = format!("open-{s}-{i}");
            let c = claim(&mut db, TENANT, &key, HASH);
            assert_eq!(c.outcome, "claimed");
            let fence = c.fence.unwrap();
            assert!(
                fence > max_before,
                "after a crash with the clock {behind:.0} s back: {key} got fence {fence}, \
                 handed out before the crash already (fences up to {max_before} were)"
            );
        }
    }
    amcheck(&mut db);
}

/// Server log lines that are not from client backends (log_line_prefix '%m [%p] %b ') and report
/// a problem: what a purge worker failing on a standby would leave.
fn problems_of_workers(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| !l.contains(" client backend "))
        .filter(|l| {
            [
                "ERROR:",
                "FATAL:",
                "PANIC:",
                "WARNING:",
                "exited with exit code",
            ]
            .iter()
            .any(|p| l.contains(p))
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn a_hot_standby_answers_replays_refuses_writes_and_purges_only_once_promoted() {
    // the primary's purge worker is paused, so expired keys stay on the primary and reach the
    // standby; the standby is configured to purge every 200 ms
    let primary = Server::start(&[REPLICATION, &["pg_idem.purge_interval = 0"]].concat());
    let standby = primary.standby("standby1", &["pg_idem.purge_interval = '200ms'"]);
    make_synchronous(&primary, "standby1");

    let mut db = primary.client();
    let done = claim(&mut db, TENANT, "done", HASH);
    complete(
        &mut db,
        TENANT,
        "done",
        done.fence.unwrap(),
        201,
        r#"{"payment": 7}"#,
    );
    let failed = claim(&mut db, TENANT, "failed", HASH);
    db.execute(
        "SELECT idem_fail_final($1, 'failed', $2, 402, '{\"error\": \"declined\"}')",
        &[&TENANT, &failed.fence],
    )
    .unwrap();
    let held = claim_with(&mut db, TENANT, "held", HASH, "10 min", None);
    db.query_one("SELECT * FROM idem_claim_seq($1, 'stream', 41)", &[&TENANT])
        .unwrap();
    let consumed: bool = db
        .query_one("SELECT idem_consume($1, 'message-1')", &[&TENANT])
        .unwrap()
        .get(0);
    assert!(consumed);
    let short = 50;
    for i in 0..short {
        let key = format!("short-{i}");
        let c = claim_with(&mut db, TENANT, &key, HASH, "1 s", Some("1 s"));
        complete(&mut db, TENANT, &key, c.fence.unwrap(), 200, "{}");
    }
    standby.wait_for_replay(&mut db, Duration::from_secs(30));

    let mut hot = standby.client();
    let in_recovery: bool = hot
        .query_one("SELECT pg_is_in_recovery()", &[])
        .unwrap()
        .get(0);
    assert!(in_recovery);

    // replays answer as on the primary
    let r = claim(&mut hot, TENANT, "done", HASH);
    assert_eq!(
        (
            r.outcome.as_str(),
            r.fence,
            r.response_code,
            r.response_body.as_deref()
        ),
        ("completed", None, Some(201), Some(r#"{"payment": 7}"#))
    );
    assert_eq!(
        r,
        claim(&mut db, TENANT, "done", HASH),
        "same as the primary"
    );
    let r = claim(&mut hot, TENANT, "failed", HASH);
    assert_eq!((r.outcome.as_str(), r.response_code), ("failed", Some(402)));
    assert_eq!(
        claim(&mut hot, TENANT, "done", "another hash").outcome,
        "mismatch"
    );
    let r = claim(&mut hot, TENANT, "held", HASH);
    assert_eq!((r.outcome.as_str(), r.fence), ("in_progress", None));
    let mark: Option<i64> = hot
        .query_one("SELECT idem_watermark($1, 'stream')", &[&TENANT])
        .unwrap()
        .get(0);
    assert_eq!(mark, Some(41), "a stream's watermark reads");
    // a consumer: a processed message (consumed, or completed through idem_claim) answers false
    for key in ["message-1", "done"] {
        let processed: bool = hot
            .query_one("SELECT idem_consume($1, $2)", &[&TENANT, &key])
            .unwrap()
            .get(0);
        assert!(!processed, "{key} on a hot standby");
    }
    let already: Vec<String> = hot.column(
        "SELECT * FROM idem_consume_many($1, ARRAY['message-1', 'done'])",
        &[&TENANT],
    );
    assert!(already.is_empty(), "{already:?}");

    // new claims and every write: 25006, and the session goes on
    let refused: Vec<(&str, Result<u64, postgres::Error>)> = vec![
        (
            "a new claim",
            try_claim(&mut hot, TENANT, "new", HASH, None, None).map(|_| 0),
        ),
        (
            "a batch claim with a new key",
            hot.execute(
                "SELECT * FROM idem_claim_many($1, ARRAY['done', 'new'], ARRAY[$2, $2])",
                &[&TENANT, &HASH],
            ),
        ),
        (
            "completing a key in progress",
            try_complete(&mut hot, TENANT, "held", held.fence.unwrap(), 200, "{}").map(|_| 0),
        ),
        (
            "a heartbeat",
            hot.execute(
                "SELECT idem_heartbeat($1, 'held', $2)",
                &[&TENANT, &held.fence],
            ),
        ),
        (
            "a release",
            hot.execute(
                "SELECT idem_release($1, 'held', $2)",
                &[&TENANT, &held.fence],
            ),
        ),
        (
            "a forget",
            hot.execute("SELECT idem_forget($1, 'done')", &[&TENANT]),
        ),
        (
            "a new stream position",
            hot.execute("SELECT * FROM idem_claim_seq($1, 'stream', 42)", &[&TENANT]),
        ),
        (
            // an upsert, whatever the position: a duplicate is refused as well on a standby
            "a duplicate stream position",
            hot.execute("SELECT * FROM idem_claim_seq($1, 'stream', 41)", &[&TENANT]),
        ),
        ("idem_purge()", hot.execute("SELECT idem_purge()", &[])),
        (
            "a new message",
            hot.execute("SELECT idem_consume($1, 'message-2')", &[&TENANT]),
        ),
        (
            "a batch with a new message",
            hot.execute(
                "SELECT * FROM idem_consume_many($1, ARRAY['message-1', 'message-2'])",
                &[&TENANT],
            ),
        ),
    ];
    for (what, result) in refused {
        match result {
            Err(e) => assert_eq!(sqlstate(&e), "25006", "{what} on a hot standby: {e:?}"),
            Ok(_) => panic!("{what} on a hot standby did not fail"),
        }
    }
    assert_eq!(
        claim(&mut hot, TENANT, "done", HASH).outcome,
        "completed",
        "the session goes on"
    );

    // the purge worker leaves the expired keys alone during recovery, and says nothing
    let expired = |db: &mut Client| -> i64 {
        db.query_one(
            "SELECT count(*) FROM idem.keys WHERE key LIKE 'short-%' AND expires_at < clock_timestamp()",
            &[],
        )
        .unwrap()
        .get(0)
    };
    wait_for("the short keys to expire", Duration::from_secs(10), || {
        expired(&mut hot) == short
    });
    // more than ten purge intervals of the standby's setting
    thread::sleep(Duration::from_secs(3));
    assert_eq!(
        expired(&mut hot),
        short,
        "nothing purged on the standby (it cannot write)"
    );
    assert_eq!(expired(&mut db), short, "the primary's purge is paused");
    let log = standby.log();
    let problems = problems_of_workers(&log);
    assert!(
        problems.is_empty(),
        "the standby's log before the failover:\n{}",
        problems.join("\n")
    );
    let workers: i64 = hot
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'pg_idem%'",
            &[],
        )
        .unwrap()
        .get(0);
    println!("pg_idem processes on the hot standby: {workers}");
    // what an operator's monitoring reads there: the database, and why nothing purges it yet
    let status: (String, Option<i32>, String) = {
        let row = hot
            .query_one("SELECT database, pid, state FROM idem_purge_status()", &[])
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!(
        status,
        (
            "postgres".to_string(),
            None,
            "waiting for recovery to end".to_string()
        )
    );

    // the failover: the promoted standby's purge worker purges them
    drop(db);
    primary.stop("immediate");
    let promoted = Instant::now();
    standby.promote();
    drop(hot);
    let mut db = standby.client();
    wait_for(
        "the promoted standby to purge the expired keys",
        Duration::from_secs(30),
        || {
            db.query_one(
                "SELECT count(*) FROM idem.keys WHERE key LIKE 'short-%'",
                &[],
            )
            .map(|r| r.get::<_, i64>(0) == 0)
            .unwrap_or(false)
        },
    );
    println!(
        "promoted: {short} expired keys purged {:.2}s after pg_ctl promote started",
        promoted.elapsed().as_secs_f64()
    );
    let purged: Option<i64> = db
        .query_one("SELECT keys_purged FROM idem_counters()", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        purged,
        Some(short),
        "the purge worker of the promoted server purged them"
    );
    let r = claim(&mut db, TENANT, "done", HASH);
    assert_eq!(
        (r.outcome.as_str(), r.response_code),
        ("completed", Some(201)),
        "live keys stay"
    );
    assert_eq!(claim(&mut db, TENANT, "held", HASH).outcome, "in_progress");
    complete(&mut db, TENANT, "held", held.fence.unwrap(), 200, "{}");
    let new = claim(&mut db, TENANT, "new", HASH);
    assert_eq!(new.outcome, "claimed");
    assert!(new.fence.unwrap() > held.fence.unwrap());
    let status: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_idem purge'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(status, 1, "one purge worker on the promoted server");
    let log = standby.log();
    let problems: Vec<String> = problems_of_workers(&log)
        .into_iter()
        // the WAL receiver loses its primary: that is the failover
        .filter(|l| !l.contains("walreceiver"))
        .collect();
    assert!(
        problems.is_empty(),
        "the promoted server's log:\n{}",
        problems.join("\n")
    );
    amcheck(&mut db);
}
