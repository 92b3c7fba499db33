//! Crashes: a backend killed with SIGKILL in the middle of a claim transaction, and an immediate
//! shutdown with keys in every state. Afterwards nothing committed is lost, nothing uncommitted
//! survives, nothing stays stuck past its lease, and the purge worker is back.

use std::thread;
use std::time::Duration;

use pg_idem_tests::*;

fn wait_until_ready(server: &Server) -> Client {
    let mut client = None;
    wait_for(
        "the server to accept connections again",
        Duration::from_secs(60),
        || {
            client = Client::connect(&server.conninfo("postgres"), NoTls).ok();
            client.is_some()
        },
    );
    client.unwrap()
}

fn wait_for_purge_worker(db: &mut Client) {
    wait_for(
        "the purge worker to be back",
        Duration::from_secs(20),
        || {
            db.query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_idem purge'",
                &[],
            )
            .map(|r| r.get::<_, i64>(0) == 1)
            .unwrap_or(false)
        },
    );
}

#[test]
fn kill_9_in_the_middle_of_a_claim_transaction() {
    let server = Server::start(&[
        "pg_idem.purge_interval = '200ms'",
        "restart_after_crash = on",
    ]);
    let mut setup = server.client();
    setup
        .batch_execute("CREATE TABLE payments (key text, fence bigint)")
        .unwrap();
    let done = claim(&mut setup, "t", "done", "h");
    complete(
        &mut setup,
        "t",
        "done",
        done.fence.unwrap(),
        201,
        r#"{"kept": true}"#,
    );

    // the counters count from when the shared memory was set up; a crash restart sets it up
    // again (the counters start from 0) without a new postmaster start time
    let counted_since = |db: &mut Client| -> (i64, f64, f64) {
        let row = db
            .query_one(
                "SELECT claims, extract(epoch FROM since)::float8, \
                        extract(epoch FROM pg_postmaster_start_time())::float8 FROM idem_counters()",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    let (claims_before, since_before, started_before) = counted_since(&mut setup);
    assert!(claims_before >= 1);

    let mut victim = server.client();
    let pid: i32 = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let mut tx = victim.transaction().unwrap();
    let c = claim(&mut tx, "t", "k", "h");
    assert_eq!(c.outcome, "claimed");
    tx.execute("INSERT INTO payments VALUES ('k', $1)", &[&c.fence])
        .unwrap();
    // a concurrent claim sees the uncommitted claim
    assert_eq!(claim(&mut setup, "t", "k", "h").outcome, "in_progress");
    let mut db = server.crash_backend(pid);
    drop(tx);
    drop(victim);
    drop(setup);
    let (claims_after, since_after, started_after) = counted_since(&mut db);
    assert_eq!(
        claims_after, 0,
        "the counters start again after a crash restart"
    );
    assert!(
        since_after > since_before,
        "idem_counters().since moves at a crash restart: {since_before} then {since_after}"
    );
    assert_eq!(
        started_after, started_before,
        "the postmaster did not restart"
    );
    let again = claim(&mut db, "t", "k", "h");
    assert_eq!(
        again.outcome, "claimed",
        "the killed transaction's claim must be gone"
    );
    assert_eq!(again.attempt, Some(1));
    assert!(
        again.fence.unwrap() > c.fence.unwrap(),
        "fences keep growing across a crash"
    );
    let payments: i64 = db
        .query_one("SELECT count(*) FROM payments", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        payments, 0,
        "the killed transaction's business write must be gone"
    );
    let replay = claim(&mut db, "t", "done", "h");
    assert_eq!(
        (replay.outcome.as_str(), replay.response_body.as_deref()),
        ("completed", Some(r#"{"kept": true}"#))
    );
    wait_for_purge_worker(&mut db);
    assert!(
        server.log().contains("terminated by signal 9"),
        "the kill did happen"
    );
}

#[test]
fn immediate_shutdown_and_restart_keep_every_state() {
    let server = Server::start(&["pg_idem.purge_interval = '200ms'"]);
    let mut db = server.client();
    let completed = claim(&mut db, "t", "completed", "h");
    complete(
        &mut db,
        "t",
        "completed",
        completed.fence.unwrap(),
        201,
        r#"{"amount": 10.50}"#,
    );
    let failed = claim(&mut db, "t", "failed", "h");
    db.execute(
        "SELECT idem_fail_final('t', 'failed', $1, 402, '{\"error\": \"declined\"}')",
        &[&failed.fence],
    )
    .unwrap();
    let stalled = claim_with(&mut db, "t", "stalled", "h", "1500 ms", None);
    db.execute(
        "SELECT idem_checkpoint('t', 'stalled', $1, 'charged', '{\"charge\": \"ch_1\"}')",
        &[&stalled.fence],
    )
    .unwrap();
    let live = claim_with(&mut db, "t", "live", "h", "10 min", None);
    db.query_one("SELECT * FROM idem_claim_seq('t', 'stream', 41)", &[])
        .unwrap();
    let before = all_keys(&mut db);
    let max_fence: i64 = db
        .query_one("SELECT max(fence) FROM idem.keys", &[])
        .unwrap()
        .get(0);
    drop(db);

    server.stop("immediate");
    server.start_again();
    let mut db = wait_until_ready(&server);
    let after = all_keys(&mut db);
    assert_eq!(
        before, after,
        "committed keys must survive an immediate shutdown unchanged"
    );

    let r = claim(&mut db, "t", "completed", "h");
    assert_eq!(
        (
            r.outcome.as_str(),
            r.response_code,
            r.response_body.as_deref()
        ),
        ("completed", Some(201), Some(r#"{"amount": 10.50}"#))
    );
    let r = claim(&mut db, "t", "failed", "h");
    assert_eq!((r.outcome.as_str(), r.response_code), ("failed", Some(402)));
    assert_eq!(
        claim(&mut db, "t", "live", "h").outcome,
        "in_progress",
        "a live lease survives"
    );
    complete(&mut db, "t", "live", live.fence.unwrap(), 200, "{}");
    // the stalled attempt is taken over once its lease has passed, with its checkpoint
    thread::sleep(Duration::from_millis(1600));
    let takeover = claim(&mut db, "t", "stalled", "h");
    assert_eq!(takeover.outcome, "claimed");
    assert_eq!(takeover.attempt, Some(2));
    assert!(
        takeover.fence.unwrap() > max_fence,
        "a fence handed out after the restart is larger than all before"
    );
    assert_eq!(takeover.checkpoint_phase.as_deref(), Some("charged"));
    let (outcome, mark): (String, i64) = db
        .query_one(
            "SELECT outcome, watermark FROM idem_claim_seq('t', 'stream', 41)",
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((outcome.as_str(), mark), ("duplicate", 41));
    wait_for_purge_worker(&mut db);
}
