//! The purge worker, on real servers started with the preload and short intervals.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use pg_idem_tests::*;

/// Inserts `n` expired, completed keys straight into idem.keys (test setup: the purge is what is
/// under test, and a million claims through the API would take minutes), keeping the store's
/// invariant purge_after <= expires_at.
fn insert_expired(db: &mut Client, tenant: &str, n: i64) {
    db.execute(
        "INSERT INTO idem.keys (tenant, key, request_hash, fence, attempt, state, claimed_at, lease_expires_at, \
                                expires_at, purge_after, ttl, response_code, response_body) \
         SELECT $1, 'expired-' || g, substr(sha256(g::text::bytea), 1, 16), nextval('idem.fence_seq'), 1, 'c', \
                now() - interval '2 days', NULL, now() - interval '1 day', now() - interval '1 day', \
                interval '1 day', 200, '{\"ok\": true}' \
         FROM generate_series(1, $2::bigint) AS g",
        &[&tenant, &n],
    )
    .expect("insert expired keys");
}

fn count_keys(db: &mut Client, pattern: &str) -> i64 {
    db.query_one(
        "SELECT count(*) FROM idem.keys WHERE key LIKE $1",
        &[&pattern],
    )
    .unwrap()
    .get(0)
}

fn worker_pid(db: &mut Client, database: &str) -> Option<i32> {
    db.query_opt(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_idem purge' AND datname = $1",
        &[&database],
    )
    .unwrap()
    .map(|r| r.get(0))
}

fn wait_for_first_pass(db: &mut Client) {
    wait_for("the first pass", Duration::from_secs(10), || {
        db.query_one("SELECT total_passes FROM idem_purge_status()", &[])
            .unwrap()
            .get::<_, i64>(0)
            >= 1
    });
}

/// A fast shutdown while a pass is under way (in a batch or in its pause) takes seconds at most.
fn assert_prompt_shutdown(server: &Server) {
    let started = Instant::now();
    server.stop("fast");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        started.elapsed()
    );
}

fn occurrences(log: &str, needle: &str) -> usize {
    log.matches(needle).count()
}

#[test]
fn expired_keys_vanish_within_two_intervals_and_live_ones_stay() {
    let server = Server::start(&["pg_idem.purge_interval = '500ms'"]);
    let mut db = server.client();
    insert_expired(&mut db, "t", 2000);
    // unexpired, completed
    let c = claim(&mut db, "t", "kept-completed", "h");
    complete(&mut db, "t", "kept-completed", c.fence.unwrap(), 200, "{}");
    // in progress, ttl passed but lease live: must stay
    claim_with(&mut db, "t", "kept-live-lease", "h", "30 s", Some("1 ms"));
    // in progress, unexpired
    claim(&mut db, "t", "kept-in-progress", "h");
    // expired through the API as well
    let e = claim_with(&mut db, "t", "expired-api", "h", "1 ms", Some("1 ms"));
    complete(&mut db, "t", "expired-api", e.fence.unwrap(), 200, "{}");

    let started = Instant::now();
    wait_for(
        "the purge worker to delete expired keys",
        Duration::from_secs(10),
        || count_keys(&mut db, "expired-%") == 0,
    );
    assert!(
        started.elapsed() <= Duration::from_millis(1000 + 500),
        "took {:?}, more than two intervals",
        started.elapsed()
    );
    assert_eq!(
        count_keys(&mut db, "kept-%"),
        3,
        "the worker deleted a key it must keep"
    );

    let row = db
        .query_one(
            "SELECT total_keys, last_pass_at IS NOT NULL, state FROM idem_purge_status()",
            &[],
        )
        .unwrap();
    let (total, passed, state): (i64, bool, String) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(total, 2001);
    assert!(passed);
    assert!(["idle", "purging"].contains(&state.as_str()), "{state}");
    let kinds: Vec<String> = db.column(
        "SELECT backend_type FROM pg_stat_activity WHERE backend_type LIKE 'pg_idem%' ORDER BY 1",
        &[],
    );
    assert_eq!(kinds, vec!["pg_idem launcher", "pg_idem purge"]);
    // the worker's deletions reach the table statistics while it runs on (autovacuum and
    // pg_stat_user_tables count them), not only when it exits
    wait_for(
        "the purged keys in pg_stat_user_tables",
        Duration::from_secs(10),
        || {
            db.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
            let deleted: i64 = db
                .query_one(
                    "SELECT n_tup_del FROM pg_stat_user_tables \
                      WHERE schemaname = 'idem' AND relname = 'keys'",
                    &[],
                )
                .unwrap()
                .get(0);
            deleted >= 2001
        },
    );
}

#[test]
fn a_pass_never_blocks_or_fails_concurrent_claims() {
    let server = Server::start(&[
        "pg_idem.purge_interval = '100ms'",
        "pg_idem.purge_batch_size = 2000",
    ]);
    let mut db = server.client();
    insert_expired(&mut db, "t", 150_000);
    let stop = AtomicBool::new(false);
    let worst_us = AtomicU64::new(0);
    let requests = AtomicU64::new(0);
    let conninfo = server.conninfo("postgres");
    thread::scope(|s| {
        for w in 0..8 {
            let (stop, worst_us, requests, conninfo) = (&stop, &worst_us, &requests, &conninfo);
            s.spawn(move || {
                let mut c = Client::connect(conninfo, NoTls).unwrap();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let key = format!("live-{w}-{i}");
                    let started = Instant::now();
                    let mut tx = c.transaction().unwrap();
                    let got = claim(&mut tx, "t", &key, "h");
                    assert_eq!(got.outcome, "claimed");
                    complete(&mut tx, "t", &key, got.fence.unwrap(), 200, "{}");
                    tx.commit().unwrap();
                    worst_us.fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    requests.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        // meanwhile: nobody may wait on a lock held by the purge worker
        let mut watcher = server.client();
        let deadline = Instant::now() + Duration::from_secs(60);
        while count_keys(&mut watcher, "expired-%") > 0 {
            assert!(Instant::now() < deadline, "the purge did not finish");
            let blocked: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity a, pg_stat_activity w \
                     WHERE w.backend_type = 'pg_idem purge' AND w.pid = ANY (pg_blocking_pids(a.pid))",
                    &[],
                )
                .unwrap()
                .get(0);
            assert_eq!(blocked, 0, "a session waited on the purge worker");
            thread::sleep(Duration::from_millis(20));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let worst = Duration::from_micros(worst_us.load(Ordering::Relaxed));
    println!(
        "{} claims while purging, worst {:?}",
        requests.load(Ordering::Relaxed),
        worst
    );
    assert!(requests.load(Ordering::Relaxed) > 100);
    assert!(
        worst < Duration::from_secs(2),
        "a claim took {worst:?} during the purge"
    );
    let live: i64 = db
        .query_one(
            "SELECT count(*) FROM idem.keys WHERE key LIKE 'live-%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        live as u64,
        requests.load(Ordering::Relaxed),
        "the purge deleted live keys"
    );
}

#[test]
fn a_terminated_worker_comes_back() {
    let server = Server::start(&["pg_idem.purge_interval = '200ms'"]);
    let mut db = server.client();
    wait_for("the purge worker", Duration::from_secs(10), || {
        worker_pid(&mut db, "postgres").is_some()
    });
    let first = worker_pid(&mut db, "postgres").unwrap();
    let terminated: bool = db
        .query_one("SELECT pg_terminate_backend($1)", &[&first])
        .unwrap()
        .get(0);
    assert!(terminated);
    wait_for("a new purge worker", Duration::from_secs(8), || {
        worker_pid(&mut db, "postgres").is_some_and(|p| p != first)
    });
    // and it purges
    insert_expired(&mut db, "t", 100);
    wait_for("the new worker to purge", Duration::from_secs(5), || {
        count_keys(&mut db, "expired-%") == 0
    });
    // the launcher comes back too
    let launcher: i32 = db
        .query_one(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_idem launcher'",
            &[],
        )
        .unwrap()
        .get(0);
    db.query_one("SELECT pg_terminate_backend($1)", &[&launcher])
        .unwrap();
    wait_for("a new launcher", Duration::from_secs(15), || {
        db.query_opt(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_idem launcher'",
            &[],
        )
        .unwrap()
        .is_some_and(|r| r.get::<_, i32>(0) != launcher)
    });
    thread::sleep(Duration::from_secs(3));
    let workers: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_idem purge'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        workers, 1,
        "a restarted launcher must not start a second worker"
    );
}

#[test]
fn missing_extension_is_logged_once_and_purging_starts_after_create_extension() {
    let server = Server::start_bare(&[
        "shared_preload_libraries = 'pg_idem'",
        "pg_idem.purge_interval = '200ms'",
    ]);
    thread::sleep(Duration::from_secs(2));
    let log = server.log();
    assert_eq!(
        occurrences(
            &log,
            "extension \"pg_idem\" is not installed in database \"postgres\""
        ),
        1,
        "{log}"
    );
    assert_eq!(
        occurrences(&log, "exited with exit code"),
        0,
        "the worker crash-looped:\n{log}"
    );
    let mut db = server.client();
    db.batch_execute("CREATE EXTENSION pg_idem").unwrap();
    insert_expired(&mut db, "t", 50);
    wait_for(
        "purging after CREATE EXTENSION",
        Duration::from_secs(5),
        || count_keys(&mut db, "expired-%") == 0,
    );
    // once more without the extension: one new log line, not one per interval
    db.batch_execute("DROP EXTENSION pg_idem").unwrap();
    thread::sleep(Duration::from_secs(1));
    assert_eq!(
        occurrences(&server.log(), "is not installed in database \"postgres\""),
        2
    );
}

#[test]
fn missing_database_is_logged_once_without_a_crash_loop() {
    let server = Server::start(&[
        "pg_idem.database = 'postgres, not_yet'",
        "pg_idem.purge_interval = '200ms'",
    ]);
    thread::sleep(Duration::from_secs(3));
    let log = server.log();
    assert_eq!(
        occurrences(&log, "database \"not_yet\" does not exist"),
        1,
        "{log}"
    );
    assert_eq!(
        occurrences(&log, "exited with exit code"),
        0,
        "a crash loop:\n{log}"
    );
    let mut db = server.client();
    let waiting: String = db
        .query_one(
            "SELECT state FROM idem_purge_status() WHERE database = 'not_yet'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(waiting, "waiting for database");
    db.batch_execute("CREATE DATABASE not_yet").unwrap();
    wait_for(
        "a purge worker in the new database",
        Duration::from_secs(10),
        || worker_pid(&mut db, "not_yet").is_some(),
    );
    let mut other = server.client_db("not_yet");
    other.batch_execute("CREATE EXTENSION pg_idem").unwrap();
    insert_expired(&mut other, "t", 20);
    wait_for(
        "purging in the new database",
        Duration::from_secs(5),
        || count_keys(&mut other, "expired-%") == 0,
    );
    assert!(
        worker_pid(&mut db, "postgres").is_some(),
        "the first database keeps its worker"
    );
}

#[test]
fn sighup_applies_a_new_interval_and_zero_pauses() {
    let server = Server::start(&["pg_idem.purge_interval = '1h'"]);
    let mut db = server.client();
    wait_for_first_pass(&mut db);
    insert_expired(&mut db, "t", 100);
    thread::sleep(Duration::from_secs(1));
    assert_eq!(
        count_keys(&mut db, "expired-%"),
        100,
        "purged before its hour-long interval"
    );
    server.write_conf(&["pg_idem.purge_interval = '200ms'".into()]);
    server.reload();
    wait_for("the new interval to apply", Duration::from_secs(5), || {
        count_keys(&mut db, "expired-%") == 0
    });

    server.write_conf(&["pg_idem.purge_interval = 0".into()]);
    server.reload();
    wait_for("the pause", Duration::from_secs(5), || {
        db.query_one("SELECT state FROM idem_purge_status()", &[])
            .unwrap()
            .get::<_, String>(0)
            == "paused"
    });
    insert_expired(&mut db, "t2", 10);
    thread::sleep(Duration::from_secs(1));
    assert_eq!(count_keys(&mut db, "expired-%"), 10, "purged while paused");
    assert!(
        worker_pid(&mut db, "postgres").is_some(),
        "a paused worker keeps running"
    );
    server.write_conf(&["pg_idem.purge_interval = '100ms'".into()]);
    server.reload();
    wait_for("purging to resume", Duration::from_secs(5), || {
        count_keys(&mut db, "expired-%") == 0
    });
}

#[test]
fn a_large_purge_runs_in_batches_and_shutdown_stays_prompt() {
    let server = Server::start(&[
        "pg_idem.purge_interval = '1h'",
        "pg_idem.purge_batch_size = 5000",
        "log_min_messages = debug1",
    ]);
    let mut db = server.client();
    wait_for_first_pass(&mut db);
    insert_expired(&mut db, "t", 120_000);
    server.write_conf(&["pg_idem.purge_interval = '300ms'".into()]);
    server.reload();
    // the pass is over once idem_purge_status() says so (the keys are gone a little earlier:
    // the pass stays within pg_idem.purge_max_rate before it looks for another batch)
    wait_for("the large purge", Duration::from_secs(60), || {
        let passes: i64 = db
            .query_one("SELECT total_passes FROM idem_purge_status()", &[])
            .unwrap()
            .get(0);
        passes >= 2 && count_keys(&mut db, "expired-%") == 0
    });
    let row = db
        .query_one(
            "SELECT total_keys, total_batches FROM idem_purge_status()",
            &[],
        )
        .unwrap();
    let (keys, batches): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(keys, 120_000);
    assert!(
        batches >= 24,
        "{keys} keys in only {batches} batches: not batched by 5000"
    );
    assert!(
        server.log().contains("deleted 120000 expired keys"),
        "the pass is logged at DEBUG1"
    );

    // a pass in progress ends promptly at shutdown
    insert_expired(&mut db, "t2", 300_000);
    server.write_conf(&["pg_idem.purge_batch_size = 500".into()]);
    server.reload();
    wait_for("a pass in progress", Duration::from_secs(10), || {
        db.query_one("SELECT state FROM idem_purge_status()", &[])
            .unwrap()
            .get::<_, String>(0)
            == "purging"
    });
    drop(db);
    assert_prompt_shutdown(&server);
}

#[test]
fn without_the_preload_idem_purge_does_the_same_job() {
    let server = Server::start_bare(&[]);
    let mut db = server.client();
    db.batch_execute("CREATE EXTENSION pg_idem").unwrap();
    insert_expired(&mut db, "t", 12_000);
    claim_with(&mut db, "t", "kept-live", "h", "1 min", Some("1 ms"));
    let first: i64 = db.query_one("SELECT idem_purge(5000)", &[]).unwrap().get(0);
    assert_eq!(first, 5000);
    let rest: i64 = db.query_one("SELECT idem_purge()", &[]).unwrap().get(0);
    assert_eq!(rest, 7000);
    assert_eq!(count_keys(&mut db, "kept-%"), 1);
    let status = db.query("SELECT * FROM idem_purge_status()", &[]).unwrap();
    assert!(status.is_empty(), "no worker without the preload");
    let counters: Option<i64> = db
        .query_one("SELECT claims FROM idem_counters()", &[])
        .unwrap()
        .get(0);
    assert_eq!(counters, None, "no shared counters without the preload");
    // the settings of the key store work without the preload too
    let lease: String = db
        .query_one("SHOW pg_idem.lease_timeout", &[])
        .unwrap()
        .get(0);
    assert_eq!(lease, "1min");
}

#[test]
fn idem_purge_max_rows_counts_deleted_keys_not_keys_looked_at() {
    // live keys whose purge_after has passed sort first in the purge index; they are re-armed,
    // and the call goes on until it has deleted max_rows expired keys behind them
    let server = Server::start_bare(&[]);
    let mut db = server.client();
    db.batch_execute("CREATE EXTENSION pg_idem").unwrap();
    for i in 0..3 {
        claim_with(
            &mut db,
            "t",
            &format!("kept-{i}"),
            "h",
            "1 min",
            Some("1 ms"),
        );
    }
    thread::sleep(Duration::from_millis(20));
    // ten expired keys that tie on one purge_after, later than the live keys'
    db.execute(
        "INSERT INTO idem.keys (tenant, key, request_hash, fence, attempt, state, claimed_at, lease_expires_at, \
                                expires_at, purge_after, ttl, response_code) \
         SELECT 't', 'expired-' || g, '\\x00', nextval('idem.fence_seq'), 1, 'c', now(), NULL, now(), now(), \
                interval '1 ms', 200 \
         FROM generate_series(1, 10) AS g",
        &[],
    )
    .unwrap();
    thread::sleep(Duration::from_millis(5));
    let first: i64 = db.query_one("SELECT idem_purge(5)", &[]).unwrap().get(0);
    assert_eq!(
        first, 5,
        "five expired keys deleted, the live ones only re-armed"
    );
    let rest: i64 = db.query_one("SELECT idem_purge()", &[]).unwrap().get(0);
    assert_eq!(rest, 5);
    assert_eq!(
        count_keys(&mut db, "kept-%"),
        3,
        "live leases are never purged"
    );
}

#[test]
fn purge_batch_delay_spreads_a_pass_out_and_shutdown_stays_prompt() {
    // purging paused (interval 0) until the keys are in; then a 1 h interval: exactly one pass
    let server = Server::start(&[
        "pg_idem.purge_interval = 0",
        "pg_idem.purge_batch_size = 1000",
        "pg_idem.purge_batch_delay = '150ms'",
    ]);
    let mut db = server.client();
    let shown: String = db
        .query_one("SHOW pg_idem.purge_batch_delay", &[])
        .unwrap()
        .get(0);
    assert_eq!(shown, "150ms");
    insert_expired(&mut db, "t", 5000);
    server.write_conf(&["pg_idem.purge_interval = '1h'".into()]);
    server.reload();
    wait_for("the paced pass", Duration::from_secs(30), || {
        db.query_one("SELECT total_keys FROM idem_purge_status()", &[])
            .unwrap()
            .get::<_, i64>(0)
            == 5000
    });
    let row = db
        .query_one(
            "SELECT last_pass_batches, last_pass_ms FROM idem_purge_status()",
            &[],
        )
        .unwrap();
    let (batches, ms): (i64, i64) = (row.get(0), row.get(1));
    assert!(batches >= 5, "5000 keys in {batches} batches of 1000");
    assert!(
        ms >= (batches - 1) * 150,
        "{batches} batches in {ms} ms: no pause of 150 ms between them"
    );

    // a pass in its pause ends promptly at shutdown
    server.write_conf(&[
        "pg_idem.purge_interval = 0".into(),
        "pg_idem.purge_batch_delay = '1min'".into(),
    ]);
    server.reload();
    insert_expired(&mut db, "t2", 3000);
    server.write_conf(&["pg_idem.purge_interval = '1h'".into()]);
    server.reload();
    wait_for("a pass in its pause", Duration::from_secs(10), || {
        count_keys(&mut db, "expired-%") == 2000
    });
    drop(db);
    assert_prompt_shutdown(&server);
}

#[test]
fn a_database_refusing_connections_is_logged_once_and_purged_once_it_accepts_them() {
    let server = Server::start_bare(&[
        "shared_preload_libraries = 'pg_idem'",
        "pg_idem.database = 'postgres, closed, template0'",
        "pg_idem.purge_interval = '200ms'",
    ]);
    let mut db = server.client();
    db.batch_execute("CREATE EXTENSION pg_idem").unwrap();
    db.batch_execute("CREATE DATABASE closed").unwrap();
    let mut closed = server.client_db("closed");
    closed.batch_execute("CREATE EXTENSION pg_idem").unwrap();
    insert_expired(&mut closed, "t", 20);
    drop(closed);
    // purged once, then closed: the worker must not retry connecting every few seconds
    wait_for("the first purge of closed", Duration::from_secs(10), || {
        count_keys(&mut server.client_db("closed"), "expired-%") == 0
    });
    db.batch_execute(
        "ALTER DATABASE closed ALLOW_CONNECTIONS false; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'closed'",
    )
    .unwrap();
    thread::sleep(Duration::from_secs(6));
    let log = server.log();
    for name in ["closed", "template0"] {
        assert_eq!(
            occurrences(
                &log,
                &format!("database \"{name}\" does not accept connections")
            ),
            1,
            "{name} logged once:\n{log}"
        );
        let state: String = db
            .query_one(
                "SELECT state FROM idem_purge_status() WHERE database = $1",
                &[&name],
            )
            .unwrap()
            .get(0);
        assert_eq!(state, "waiting for database to accept connections");
    }
    assert!(
        occurrences(&log, "is not currently accepting connections") <= 1,
        "a FATAL loop:\n{log}"
    );
    // open again: purged again
    db.batch_execute("ALTER DATABASE closed ALLOW_CONNECTIONS true")
        .unwrap();
    let mut closed = server.client_db("closed");
    insert_expired(&mut closed, "t2", 20);
    wait_for(
        "purging after ALLOW_CONNECTIONS true",
        Duration::from_secs(10),
        || count_keys(&mut closed, "expired-%") == 0,
    );
}

/// DROP DATABASE without FORCE succeeds although a purge worker is connected to it, with pg_idem
/// installed (idle between passes) or not (waiting for CREATE EXTENSION); a database created
/// again under the same name is purged again.
#[test]
fn a_purged_database_can_be_dropped_without_force() {
    let server = Server::start(&[
        "pg_idem.database = 'postgres, with_ext, without_ext'",
        "pg_idem.purge_interval = '1h'",
    ]);
    let mut db = server.client();
    db.batch_execute("CREATE DATABASE with_ext").unwrap();
    db.batch_execute("CREATE DATABASE without_ext").unwrap();
    let mut with_ext = server.client_db("with_ext");
    with_ext.batch_execute("CREATE EXTENSION pg_idem").unwrap();
    insert_expired(&mut with_ext, "t", 10);
    drop(with_ext);
    for name in ["with_ext", "without_ext"] {
        wait_for("a purge worker connected", Duration::from_secs(10), || {
            worker_pid(&mut db, name).is_some()
        });
    }
    thread::sleep(Duration::from_millis(500));
    for name in ["with_ext", "without_ext"] {
        let t0 = Instant::now();
        db.batch_execute(&format!("DROP DATABASE {name}"))
            .unwrap_or_else(|e| panic!("DROP DATABASE {name}: {e}"));
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{name} dropped after {:?}",
            t0.elapsed()
        );
    }
    thread::sleep(Duration::from_secs(4));
    let state: String = db
        .query_one(
            "SELECT state FROM idem_purge_status() WHERE database = 'with_ext'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(state, "waiting for database");
    // created again: a worker comes back and purges (interval 1h: the first pass runs at start)
    db.batch_execute("CREATE DATABASE with_ext").unwrap();
    let mut again = server.client_db("with_ext");
    again.batch_execute("CREATE EXTENSION pg_idem").unwrap();
    insert_expired(&mut again, "t", 10);
    wait_for(
        "purging in the new database",
        Duration::from_secs(10),
        || count_keys(&mut again, "expired-%") == 0,
    );
}

#[test]
fn a_purge_pass_keeps_to_its_budget_of_keys_per_second() {
    // 30,000 keys at 10,000 keys/s: the pass cannot end in less than about 3 s, however fast
    // the machine deletes (without the budget it takes a fraction of a second)
    let server = Server::start(&[
        "pg_idem.purge_interval = '1h'",
        "pg_idem.purge_batch_size = 1000",
        "pg_idem.purge_max_rate = 10000",
    ]);
    let mut db = server.client();
    wait_for_first_pass(&mut db);
    insert_expired(&mut db, "t", 30_000);
    server.write_conf(&["pg_idem.purge_interval = '200ms'".into()]);
    server.reload();
    wait_for("the paced pass", Duration::from_secs(60), || {
        db.query_one("SELECT total_passes FROM idem_purge_status()", &[])
            .unwrap()
            .get::<_, i64>(0)
            >= 2
    });
    let row = db
        .query_one(
            "SELECT last_pass_keys, last_pass_ms FROM idem_purge_status()",
            &[],
        )
        .unwrap();
    let (keys, ms): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(keys, 30_000);
    assert!(ms >= 2_800, "30,000 keys at 10,000/s in {ms} ms");
}

/// SIGTERM ends a purge worker, and the launcher, even while they wait inside PostgreSQL. A
/// client holds an ACCESS EXCLUSIVE lock on idem.keys in an open transaction: the purge batch's
/// FOR UPDATE SKIP LOCKED skips locked rows, not a locked table, so the worker waits for the
/// table lock. With pg_database locked too (the catalog the launcher scans before it starts a
/// worker), the launcher waits for that lock once the worker is gone. Each must leave
/// within a few seconds of pg_terminate_backend while the locks are still held (a wait that
/// only woke on its latch and went back to sleep would hold up a shutdown, or pg_upgrade's).
/// pg_terminate_backend rather than `pg_ctl stop -m fast`: a fast stop would terminate the lock
/// holder as well, and the worker would get its lock and finish without ever being interrupted.
/// Everything runs on the lock holder's own connection: a new connection would wait for
/// pg_database too.
#[test]
fn sigterm_ends_a_worker_and_the_launcher_waiting_for_a_lock() {
    let server = Server::start(&["pg_idem.purge_interval = '200ms'"]);
    let mut db = server.client();
    insert_expired(&mut db, "t", 100);
    let mut holder = server.client();
    let mut tx = holder.transaction().unwrap();
    tx.batch_execute("LOCK TABLE idem.keys IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    // pg_stat_activity keeps one snapshot per transaction: clear it before each look
    let waiting_for = |tx: &mut postgres::Transaction<'_>, backend_type: &str, table: &str| {
        tx.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
        tx.query_opt(
            "SELECT a.pid FROM pg_stat_activity AS a JOIN pg_locks AS l ON l.pid = a.pid \
              WHERE a.backend_type = $1 AND NOT l.granted AND l.relation = $2::text::regclass",
            &[&backend_type, &table],
        )
        .unwrap()
        .map(|r| r.get::<_, i32>(0))
    };
    let mut worker = None;
    wait_for(
        "the purge worker to wait for the lock on idem.keys",
        Duration::from_secs(10),
        || {
            worker = waiting_for(&mut tx, "pg_idem purge", "idem.keys");
            worker.is_some()
        },
    );
    let worker = worker.unwrap();
    // once the worker is gone the launcher looks pg_database up to start another one: it
    // waits for this lock (the lock holder's own catalog look-ups are not blocked by it)
    tx.batch_execute("LOCK TABLE pg_catalog.pg_database IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let alive = |tx: &mut postgres::Transaction<'_>, pid: i32| {
        tx.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
        tx.query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .unwrap()
        .get::<_, i64>(0)
            == 1
    };
    let terminate = |tx: &mut postgres::Transaction<'_>, pid: i32| {
        let signalled: bool = tx
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .unwrap()
            .get(0);
        assert!(signalled, "pg_terminate_backend({pid})");
        let started = Instant::now();
        while alive(tx, pid) && started.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(50));
        }
        started.elapsed()
    };
    let took = terminate(&mut tx, worker);
    assert!(
        !alive(&mut tx, worker),
        "the purge worker still waits for the lock on idem.keys {took:?} after SIGTERM"
    );

    let mut launcher = None;
    wait_for(
        "the launcher to wait for the lock on pg_database",
        Duration::from_secs(10),
        || {
            launcher = waiting_for(&mut tx, "pg_idem launcher", "pg_catalog.pg_database");
            launcher.is_some()
        },
    );
    let launcher = launcher.unwrap();
    let took = terminate(&mut tx, launcher);
    assert!(
        !alive(&mut tx, launcher),
        "the launcher still waits for the lock on pg_database {took:?} after SIGTERM"
    );
    tx.rollback().unwrap();

    // both come back (the launcher after its restart time) and the keys get purged
    wait_for("a new purge worker", Duration::from_secs(20), || {
        worker_pid(&mut db, "postgres").is_some_and(|p| p != worker)
    });
    wait_for("the new worker to purge", Duration::from_secs(10), || {
        count_keys(&mut db, "expired-%") == 0
    });
    let log = server.log();
    assert_eq!(
        occurrences(
            &log,
            "terminating background worker \"pg_idem purge\" due to administrator command"
        ),
        1,
        "{log}"
    );
    assert!(!log.contains("PANIC") && !log.contains("XX000"), "{log}");
    drop(db);
    assert_prompt_shutdown(&server);
}
