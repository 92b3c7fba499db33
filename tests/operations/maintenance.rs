//! What a DBA runs on every table, run on idem.keys while the application works: REINDEX
//! (concurrently or not, of the table and of each index), VACUUM FULL, CLUSTER, CREATE and DROP
//! INDEX CONCURRENTLY, ALTER TABLE ... SET, plain VACUUM. Real sessions claim, complete, take over,
//! forget and release keys meanwhile (the invariant workload of harness/workload.rs, and a churn
//! of forgets and releases beside it). Nothing may fail but what is documented (none of these
//! commands makes a claim fail), every key keeps exactly one business effect, and amcheck finds
//! the table and every index consistent afterwards.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use pg_idem_tests::workload::{self, Config, Mode, Rng2};
use pg_idem_tests::*;

/// The maintenance, in the order it is run, round after round. REINDEX CONCURRENTLY swaps a new
/// index in under the old one's name (a new OID), which is what made claims fail with XX000
/// "index not found" in 0.3.0; it comes back several times per round.
const MAINTENANCE: &[&str] = &[
    "REINDEX INDEX CONCURRENTLY idem.keys_pkey",
    "VACUUM idem.keys",
    "REINDEX INDEX CONCURRENTLY idem.keys_purge_after_idx",
    "REINDEX TABLE CONCURRENTLY idem.keys",
    "CREATE INDEX CONCURRENTLY keys_maintenance_idx ON idem.keys (claimed_at)",
    "REINDEX INDEX CONCURRENTLY idem.keys_pkey",
    "DROP INDEX CONCURRENTLY idem.keys_maintenance_idx",
    "ALTER TABLE idem.keys SET (fillfactor = 90)",
    "REINDEX INDEX idem.keys_pkey",
    "REINDEX TABLE idem.keys",
    "VACUUM FULL idem.keys",
    "REINDEX INDEX CONCURRENTLY idem.keys_pkey",
    "CLUSTER idem.keys USING keys_pkey",
    "ALTER TABLE idem.keys SET (fillfactor = 95)",
    "REINDEX TABLE CONCURRENTLY idem.keys",
];

/// Runs the maintenance commands one per call, in a cycle, and remembers what failed.
struct Dba {
    db: Mutex<(Client, usize)>,
    failures: Mutex<Vec<String>>,
    commands: AtomicU64,
}

impl Dba {
    fn new(server: &Server) -> Dba {
        Dba {
            db: Mutex::new((server.client(), 0)),
            failures: Mutex::new(Vec::new()),
            commands: AtomicU64::new(0),
        }
    }

    fn next(&self) {
        let mut guard = self.db.lock().unwrap();
        let (db, position) = &mut *guard;
        let sql = MAINTENANCE[*position % MAINTENANCE.len()];
        *position += 1;
        if let Err(e) = db.batch_execute(sql) {
            self.failures.lock().unwrap().push(format!("{sql}: {e:?}"));
        }
        self.commands.fetch_add(1, Ordering::Relaxed);
        drop(guard);
        thread::sleep(Duration::from_millis(50));
    }

    /// Whole rounds of the maintenance were run.
    fn rounds(&self) -> u64 {
        self.commands.load(Ordering::Relaxed) / MAINTENANCE.len() as u64
    }
}

/// Claims, releases and forgets keys of tenant `scratch` until `stop` (no business effect, and
/// nothing left completed: the workload's checks read every completed key); returns how many
/// calls it made, and any error.
fn churn(server: &Server, worker: usize, stop: &AtomicBool) -> (u64, Vec<String>) {
    let mut db = server.client();
    let mut errors = Vec::new();
    let mut calls = 0u64;
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let key = format!("churn-{worker}-{}", i % 50);
        let result = (|| -> Result<(), postgres::Error> {
            let c = try_claim(&mut db, "scratch", &key, "h", Some("1 min"), None)?;
            calls += 1;
            match (c.outcome.as_str(), c.fence) {
                ("claimed", Some(fence)) if i.is_multiple_of(2) => {
                    db.execute("SELECT idem_release('scratch', $1, $2)", &[&key, &fence])?;
                }
                _ => {
                    db.execute("SELECT idem_forget('scratch', $1)", &[&key])?;
                }
            }
            calls += 1;
            Ok(())
        })();
        if let Err(e) = result {
            errors.push(format!("{key}: {e:?}"));
        }
    }
    (calls, errors)
}

/// Takes keys of tenant `takeover` over until `stop`: a claim with a 20 ms lease, committed and
/// left; 40 ms later a claim of the same key must take it over (attempt 2), the new fence
/// completes it and the old one is refused (55000); then the key is forgotten (nothing left
/// completed). The workload's own takeovers depend on a duplicate arriving while an attempt
/// stalls, which a run may never see; these do not. Returns the takeovers and any error.
fn take_over(server: &Server, stop: &AtomicBool) -> (u64, Vec<String>) {
    let mut db = server.client();
    let mut errors = Vec::new();
    let mut takeovers = 0u64;
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let key = format!("takeover-{i}");
        let result = (|| -> Result<Option<String>, postgres::Error> {
            let first = try_claim(&mut db, "takeover", &key, "h", Some("20 ms"), None)?;
            thread::sleep(Duration::from_millis(40));
            let second = try_claim(&mut db, "takeover", &key, "h", Some("1 min"), None)?;
            if (second.outcome.as_str(), second.attempt) != ("claimed", Some(2)) {
                return Ok(Some(format!("no takeover: {first:?} then {second:?}")));
            }
            takeovers += 1;
            try_complete(
                &mut db,
                "takeover",
                &key,
                second.fence.unwrap_or(0),
                200,
                "{}",
            )?;
            let stale = try_complete(
                &mut db,
                "takeover",
                &key,
                first.fence.unwrap_or(0),
                200,
                "{}",
            );
            let refused = matches!(&stale, Err(e) if sqlstate(e) == "55000");
            db.execute("SELECT idem_forget('takeover', $1)", &[&key])?;
            Ok((!refused).then(|| format!("the stale fence was not refused: {stale:?}")))
        })();
        match result {
            Ok(None) => {}
            Ok(Some(wrong)) => errors.push(format!("{key}: {wrong}")),
            Err(e) => errors.push(format!("{key}: {e:?}")),
        }
    }
    (takeovers, errors)
}

fn run_under_maintenance(server: &Server, mode: Mode) {
    let mut setup = server.client();
    workload::prepare(&mut setup);
    // enough keys that rebuilding the table and its indexes takes a while
    setup
        .batch_execute(
            "SELECT count(idem_complete('bulk', s.k, (idem_claim('bulk', s.k, 'h')).fence, 200, '{\"ok\": true}')) \
               FROM (SELECT 'bulk-' || g AS k FROM generate_series(1, 20000) AS g) AS s",
        )
        .expect("fill idem.keys");
    let config = Config {
        workers: 6,
        keys: 5000,
        tenants: 3,
        hot_keys: 30,
        requests_per_worker: 100_000,
        max_duration: Duration::from_secs(40),
        ..Config::default()
    };
    let dba = Dba::new(server);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    // the workload stops once three rounds of maintenance ran (or at max_duration)
    let chaos = |_: &mut Rng2| {
        dba.next();
        dba.rounds() < 3
    };
    let (report, churned, taken) = thread::scope(|scope| {
        let churners: Vec<_> = (0..2)
            .map(|w| {
                let stop = &stop;
                scope.spawn(move || churn(server, w, stop))
            })
            .collect();
        let taker = (mode == Mode::Lease).then(|| {
            let stop = &stop;
            scope.spawn(move || take_over(server, stop))
        });
        let report = workload::run(&server.conninfo("postgres"), mode, &config, Some(&chaos));
        stop.store(true, Ordering::Relaxed);
        let churned: Vec<_> = churners.into_iter().map(|c| c.join().unwrap()).collect();
        let taken = taker.map(|t| t.join().unwrap());
        (report, churned, taken)
    });
    println!(
        "{mode:?} under maintenance: {report}; {} maintenance commands in {:.1}s",
        dba.commands.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    let failures = dba.failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "maintenance failed:\n{}",
        failures.join("\n")
    );
    assert!(
        dba.rounds() >= 1,
        "only {} maintenance commands ran while the workload ran",
        dba.commands.load(Ordering::Relaxed)
    );
    let c = &report.counters;
    assert_eq!(
        c.unexpected_errors.load(Ordering::Relaxed),
        0,
        "claims or completions failed under maintenance (see stderr)"
    );
    assert!(
        report.violations.is_empty(),
        "invariants violated:\n{}",
        report.violations.join("\n")
    );
    assert!(c.claimed.load(Ordering::Relaxed) > 50, "{report}");
    for (calls, errors) in churned {
        assert!(
            errors.is_empty(),
            "forgets and releases failed under maintenance:\n{}",
            errors.join("\n")
        );
        assert!(calls > 50, "only {calls} churn calls ran");
    }
    if let Some((takeovers, errors)) = taken {
        println!("{takeovers} takeovers of tenant \"takeover\" under maintenance");
        assert!(
            errors.is_empty(),
            "takeovers failed under maintenance:\n{}",
            errors.join("\n")
        );
        assert!(takeovers > 10, "only {takeovers} takeovers ran");
    }
    amcheck(&mut server.client());
}

#[test]
fn maintenance_under_load_in_one_transaction_mode() {
    let server = Server::start(&[]);
    run_under_maintenance(&server, Mode::OneTransaction);
}

#[test]
fn maintenance_under_load_in_lease_mode() {
    let server = Server::start(&[]);
    run_under_maintenance(&server, Mode::Lease);
}
