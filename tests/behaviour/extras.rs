//! Batch claims, stream watermarks, checkpoints, downstream keys, the fence guard, statistics and
//! the stale UUIDv7 guard, through real client connections.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use pg_idem_tests::*;

fn fence_of(c: &Claim) -> i64 {
    c.fence.expect("fence")
}

#[test]
fn claim_many_claims_a_batch_in_input_order() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let done = claim(&mut db, "t", "done", "h");
    complete(&mut db, "t", "done", fence_of(&done), 201, r#"{"n": 1}"#);
    claim(&mut db, "t", "busy", "h");

    let rows = db
        .query(
            "SELECT key, outcome, fence, attempt, response_code, response_body::text \
             FROM idem_claim_many('t', ARRAY['new-1', 'done', 'busy', 'new-1', 'done', 'new-2'], \
                                       ARRAY['h', 'h', 'h', 'h', 'other', 'h'])",
            &[],
        )
        .unwrap();
    let got: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        [
            ("new-1", "claimed"),
            ("done", "completed"),
            ("busy", "in_progress"),
            ("new-1", "in_progress"), // a repeat inside the batch meets its own earlier claim
            ("done", "mismatch"),
            ("new-2", "claimed"),
        ]
        .map(|(k, o)| (k.to_string(), o.to_string()))
    );
    assert_eq!(
        rows[1].get::<_, Option<String>>(5).as_deref(),
        Some(r#"{"n": 1}"#)
    );
    let f1: i64 = rows[0].get(2);
    let f2: i64 = rows[5].get(2);
    assert!(f2 > f1);
    complete(&mut db, "t", "new-1", f1, 200, "{}");

    // the batch runs in the caller's transaction: a rollback undoes every claim of it
    let mut tx = db.transaction().unwrap();
    tx.query(
        "SELECT * FROM idem_claim_many('t', ARRAY['r1', 'r2'], ARRAY['h', 'h'])",
        &[],
    )
    .unwrap();
    tx.rollback().unwrap();
    assert_eq!(claim(&mut db, "t", "r1", "h").outcome, "claimed");

    for (sql, state) in [
        ("SELECT * FROM idem_claim_many('t', NULL, ARRAY['h'])", "22004"),
        ("SELECT * FROM idem_claim_many('t', ARRAY['a', NULL], ARRAY['h', 'h'])", "22004"),
        ("SELECT * FROM idem_claim_many('t', ARRAY['a'], ARRAY[NULL::text])", "22004"),
        ("SELECT * FROM idem_claim_many('t', ARRAY['a', 'b'], ARRAY['h'])", "22023"),
        ("SELECT * FROM idem_claim_many('t', ARRAY['a', ''], ARRAY['h', 'h'])", "22023"),
        ("SELECT * FROM idem_claim_many(NULL, ARRAY['a'], ARRAY['h'])", "22004"),
        (
            "SELECT * FROM idem_claim_many('t', array_fill('k'::text, ARRAY[1001]), array_fill('h'::text, ARRAY[1001]))",
            "54000",
        ),
    ] {
        let err = db.query(sql, &[]).unwrap_err();
        assert_eq!(sqlstate(&err), state, "{sql}");
    }
    let keys: Vec<String> = (0..1000).map(|i| format!("bulk-{i}")).collect();
    let hashes = vec!["h".to_string(); 1000];
    let claimed: i64 = db
        .query_one(
            "SELECT count(*) FROM idem_claim_many('t', $1, $2) WHERE outcome = 'claimed'",
            &[&keys, &hashes],
        )
        .unwrap()
        .get(0);
    assert_eq!(claimed, 1000, "a batch at the limit is accepted");
}

#[test]
fn stream_watermarks_dedup_and_roll_back() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let seq = |db: &mut Client, s: i64| -> (String, i64) {
        let r = db
            .query_one(
                "SELECT outcome, watermark FROM idem_claim_seq('t', 'p0', $1)",
                &[&s],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(seq(&mut db, 10), ("new".into(), 10));
    assert_eq!(seq(&mut db, 10), ("duplicate".into(), 10));
    assert_eq!(seq(&mut db, 3), ("duplicate".into(), 10));
    assert_eq!(seq(&mut db, 11), ("new".into(), 11));
    // a rollback undoes the watermark
    let mut tx = db.transaction().unwrap();
    let r = tx
        .query_one("SELECT outcome FROM idem_claim_seq('t', 'p0', 20)", &[])
        .unwrap();
    assert_eq!(r.get::<_, String>(0), "new");
    tx.rollback().unwrap();
    assert_eq!(seq(&mut db, 20), ("new".into(), 20));
    // streams and tenants are independent; one row per stream whatever the message count
    assert_eq!(seq(&mut db, 21).0, "new");
    db.query_one("SELECT * FROM idem_claim_seq('other-tenant', 'p0', 5)", &[])
        .unwrap();
    for s in 100..300 {
        db.query_one(
            "SELECT * FROM idem_claim_seq('t', 'p1', $1)",
            &[&(s as i64)],
        )
        .unwrap();
    }
    let rows: i64 = db
        .query_one("SELECT count(*) FROM idem.watermarks", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 3);
    let (mark, previous, after): (Option<i64>, Option<i64>, Option<i64>) = db
        .query_one("SELECT idem_watermark('t', 'p1'), idem_reset_watermark('t', 'p1', 150), idem_watermark('t', 'p1')", &[])
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .unwrap();
    assert_eq!((mark, previous, after), (Some(299), Some(299), Some(150)));
    let none: Option<i64> = db
        .query_one("SELECT idem_watermark('t', 'never')", &[])
        .unwrap()
        .get(0);
    assert_eq!(none, None);
    let err = db
        .query_one("SELECT * FROM idem_claim_seq('t', 'p0', NULL)", &[])
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22004");
    let err = db
        .query_one("SELECT * FROM idem_claim_seq('t', '', 1)", &[])
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22023");
}

#[test]
fn concurrent_calls_on_one_stream_serialise() {
    let server = Server::start(&[]);
    let mut a = server.client();
    // the second caller waits for the first, then sees the outcome of its commit or rollback
    for (finish, expected) in [("COMMIT", "duplicate"), ("ROLLBACK", "new")] {
        let stream = format!("s-{finish}");
        a.batch_execute("BEGIN").unwrap();
        let first: String = a
            .query_one("SELECT outcome FROM idem_claim_seq('t', $1, 7)", &[&stream])
            .unwrap()
            .get(0);
        assert_eq!(first, "new");
        let conninfo = server.conninfo("postgres");
        let (tx, rx) = mpsc::channel();
        let stream2 = stream.clone();
        let waiter = thread::spawn(move || {
            let mut b = Client::connect(&conninfo, NoTls).unwrap();
            let outcome: String = b
                .query_one(
                    "SELECT outcome FROM idem_claim_seq('t', $1, 7)",
                    &[&stream2],
                )
                .unwrap()
                .get(0);
            tx.send(outcome).unwrap();
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(500)).is_err(),
            "the second call must wait for the first"
        );
        a.batch_execute(finish).unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            expected,
            "after {finish}"
        );
        waiter.join().unwrap();
    }

    // eight consumers read the same ordered stream: every message is processed exactly once
    let mut setup = server.client();
    setup
        .batch_execute("CREATE TABLE processed (seq bigint)")
        .unwrap();
    thread::scope(|s| {
        for _ in 0..8 {
            let conninfo = server.conninfo("postgres");
            s.spawn(move || {
                let mut c = Client::connect(&conninfo, NoTls).unwrap();
                for seq in 1..=200i64 {
                    let mut tx = c.transaction().unwrap();
                    let outcome: String = tx
                        .query_one(
                            "SELECT outcome FROM idem_claim_seq('t', 'shared', $1)",
                            &[&seq],
                        )
                        .unwrap()
                        .get(0);
                    if outcome == "new" {
                        tx.execute("INSERT INTO processed VALUES ($1)", &[&seq])
                            .unwrap();
                    }
                    tx.commit().unwrap();
                }
            });
        }
    });
    let (total, distinct): (i64, i64) = setup
        .query_one("SELECT count(*), count(DISTINCT seq) FROM processed", &[])
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((total, distinct), (200, 200), "each message exactly once");
}

#[test]
fn a_takeover_resumes_from_the_last_checkpoint() {
    let server = Server::start(&[]);
    let mut a = server.client();
    let mut b = server.client();
    let first = claim_with(&mut a, "t", "job", "h", "300 ms", None);
    let step_key: String = a
        .query_one(
            "SELECT idem_downstream_key('t', 'job', 'charge')::text",
            &[],
        )
        .unwrap()
        .get(0);
    a.execute(
        "SELECT idem_checkpoint('t', 'job', $1, 'charged', '{\"charge_id\": \"ch_42\"}')",
        &[&fence_of(&first)],
    )
    .unwrap();
    // worker A stalls; B takes over and gets the checkpoint, and the same downstream key
    thread::sleep(Duration::from_millis(400));
    let second = claim(&mut b, "t", "job", "h");
    assert_eq!(second.outcome, "claimed");
    assert_eq!(second.attempt, Some(2));
    assert_eq!(second.checkpoint_phase.as_deref(), Some("charged"));
    assert_eq!(
        second.checkpoint_data.as_deref(),
        Some(r#"{"charge_id": "ch_42"}"#)
    );
    let again: String = b
        .query_one(
            "SELECT idem_downstream_key('t', 'job', 'charge')::text",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        again, step_key,
        "every attempt of a step reuses its downstream key"
    );
    let other_step: String = b
        .query_one("SELECT idem_downstream_key('t', 'job', 'email')::text", &[])
        .unwrap()
        .get(0);
    assert_ne!(other_step, step_key);
    // the documented formula, so other languages can derive it: uuid5(ns, tenant \0 key \0 step)
    let documented: String = b
        .query_one("SELECT idem_downstream_key('t', 'k', 'charge')::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(documented, "3dd205ce-246b-5aac-a799-e95732144788");
    // A's late checkpoint is refused; B's progresses
    let err = a
        .execute(
            "SELECT idem_checkpoint('t', 'job', $1, 'emailed', NULL)",
            &[&fence_of(&first)],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
    b.execute(
        "SELECT idem_checkpoint('t', 'job', $1, 'emailed', NULL)",
        &[&fence_of(&second)],
    )
    .unwrap();
    complete(&mut b, "t", "job", fence_of(&second), 200, "{}");
    // a fresh claim after expiry or release starts without a checkpoint
    let fresh = claim(&mut b, "t", "job2", "h");
    assert_eq!(fresh.checkpoint_phase, None);
    let err = b
        .execute(
            "SELECT idem_checkpoint('t', 'job2', $1, NULL)",
            &[&fence_of(&fresh)],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "22004");
    set_limit(&mut b, "pg_idem.max_response_bytes", "1kB");
    let big = format!(r#"{{"x": "{}"}}"#, "y".repeat(2000));
    let err = b
        .execute(
            "SELECT idem_checkpoint('t', 'job2', $1, 'p', $2::text::jsonb)",
            &[&fence_of(&fresh), &big],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "54000");
}

#[test]
fn assert_fence_guards_the_final_business_writes() {
    let server = Server::start(&[]);
    let mut a = server.client();
    let mut b = server.client();
    a.batch_execute("CREATE TABLE ledger (key text, fence bigint)")
        .unwrap();
    let first = claim_with(&mut a, "t", "k", "h", "200 ms", None);
    thread::sleep(Duration::from_millis(300));
    // A finishes late, but nobody took over yet: its guard holds the key until it commits
    let mut tx = a.transaction().unwrap();
    tx.execute(
        "SELECT idem_assert_fence('t', 'k', $1)",
        &[&fence_of(&first)],
    )
    .unwrap();
    let started = Instant::now();
    assert_eq!(
        claim(&mut b, "t", "k", "h").outcome,
        "in_progress",
        "no takeover while the guard holds"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the claim waited on the guard"
    );
    tx.execute("INSERT INTO ledger VALUES ('k', $1)", &[&fence_of(&first)])
        .unwrap();
    complete(&mut tx, "t", "k", fence_of(&first), 200, "{}");
    tx.commit().unwrap();
    assert_eq!(claim(&mut b, "t", "k", "h").outcome, "completed");

    // a stale worker's guard fails before it writes anything
    let old = claim_with(&mut a, "t", "k2", "h", "100 ms", None);
    thread::sleep(Duration::from_millis(200));
    let new = claim(&mut b, "t", "k2", "h");
    assert_eq!(new.outcome, "claimed");
    let err = a
        .execute(
            "SELECT idem_assert_fence('t', 'k2', $1)",
            &[&fence_of(&old)],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
    let err = a
        .execute("SELECT idem_assert_fence('t', 'nope', 1)", &[])
        .unwrap_err();
    assert_eq!(sqlstate(&err), "P0002");
}

#[test]
fn statistics_count_what_happened() {
    let server = Server::start(&[]);
    let mut db = server.client();
    db.query_one("SELECT idem_stats_reset()", &[]).unwrap();
    let c = claim(&mut db, "ta", "k1", "h");
    assert_eq!(claim(&mut db, "ta", "k1", "h").outcome, "in_progress");
    complete(&mut db, "ta", "k1", fence_of(&c), 200, "{}");
    claim(&mut db, "ta", "k1", "h"); // replay
    claim(&mut db, "ta", "k1", "x"); // mismatch
    let f = claim(&mut db, "tb", "k1", "h");
    db.execute(
        "SELECT idem_fail_final('tb', 'k1', $1, 500)",
        &[&fence_of(&f)],
    )
    .unwrap();
    claim(&mut db, "tb", "k1", "h"); // failed replay
    let s = claim_with(&mut db, "tb", "stall", "h", "50 ms", None);
    thread::sleep(Duration::from_millis(100));
    let stalled: Vec<(String, String, i64)> = db
        .query("SELECT tenant, key, fence FROM idem_stalled()", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        stalled,
        vec![("tb".to_string(), "stall".to_string(), fence_of(&s))]
    );
    let none: i64 = db
        .query_one("SELECT count(*) FROM idem_stalled('1 hour')", &[])
        .unwrap()
        .get(0);
    assert_eq!(none, 0);
    let stats = db
        .query_one(
            "SELECT keys_in_progress, keys_completed, keys_failed, keys_stalled FROM idem_stats()",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            stats.get::<_, i64>(0),
            stats.get::<_, i64>(1),
            stats.get::<_, i64>(2),
            stats.get::<_, i64>(3)
        ),
        (1, 1, 1, 1)
    );
    claim(&mut db, "tb", "stall", "h"); // takeover
    let err = try_complete(&mut db, "tb", "stall", fence_of(&s), 200, "{}").unwrap_err();
    assert_eq!(sqlstate(&err), "55000"); // stale fence
    let e = claim_with(&mut db, "tb", "gone", "h", "1 ms", Some("1 ms"));
    complete(&mut db, "tb", "gone", fence_of(&e), 200, "{}");
    thread::sleep(Duration::from_millis(20));
    let expired: i64 = db
        .query_one("SELECT keys_expired FROM idem_stats()", &[])
        .unwrap()
        .get(0);
    assert_eq!(expired, 1);
    db.query_one("SELECT idem_purge()", &[]).unwrap();

    // the keys by state above are counted by both editions; what follows is counted in shared
    // memory
    if native_only("shared-memory counters (idem_counters, idem_tenant_stats' counts)") {
        return;
    }
    let row = db
        .query_one(
            "SELECT claims, replays_completed, replays_failed, in_progress, mismatches, takeovers, stale_fences, keys_purged \
             FROM idem_counters()",
            &[],
        )
        .unwrap();
    let got: Vec<i64> = (0..8).map(|i| row.get(i)).collect();
    assert_eq!(
        got,
        vec![5, 1, 1, 1, 1, 1, 1, 1],
        "claims, replays, failed replays, in_progress, mismatches, takeovers, stale fences, purged"
    );
    let per_tenant: Vec<(String, i64, i64, i64)> = db
        .query(
            "SELECT tenant, claims, replays, mismatches FROM idem_tenant_stats() ORDER BY tenant",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        per_tenant,
        vec![("ta".into(), 1, 1, 1), ("tb".into(), 4, 1, 0)]
    );
    let reset: bool = db
        .query_one("SELECT idem_stats_reset()", &[])
        .unwrap()
        .get(0);
    assert!(reset);
    let claims: i64 = db
        .query_one("SELECT claims FROM idem_counters()", &[])
        .unwrap()
        .get(0);
    assert_eq!(claims, 0);
}

#[test]
fn stale_uuidv7_keys_are_refused_when_asked() {
    let server = Server::start(&[]);
    let mut db = server.client();
    // a UUIDv7 minted two days ago: 48-bit Unix milliseconds, version 7, variant 10
    let old: String = db
        .query_one(
            "SELECT lpad(to_hex((extract(epoch FROM now() - interval '2 days') * 1000)::bigint), 12, '0') \
                    || '7abc8def0123456789ab'",
            &[],
        )
        .unwrap()
        .get(0);
    let old = format!(
        "{}-{}-{}-{}-{}",
        &old[0..8],
        &old[8..12],
        &old[12..16],
        &old[16..20],
        &old[20..32]
    );
    assert_eq!(
        claim(&mut db, "t", &old, "h").outcome,
        "claimed",
        "the guard is off by default"
    );
    db.batch_execute("SET pg_idem.reject_stale_uuidv7 = on")
        .unwrap();
    // an existing key is replayed as usual; an absent old key is refused
    let existing = claim(&mut db, "t", &old, "h");
    assert_eq!(existing.outcome, "in_progress");
    let other_old = old.replace("7abc", "7abd");
    assert_eq!(claim(&mut db, "t", &other_old, "h").outcome, "stale_key");
    let exists: i64 = db
        .query_one(
            "SELECT count(*) FROM idem.keys WHERE key = $1",
            &[&other_old],
        )
        .unwrap()
        .get(0);
    assert_eq!(exists, 0, "a stale key is not stored");
    let fresh: String = db
        .query_one("SELECT idem_new_key()::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(claim(&mut db, "t", &fresh, "h").outcome, "claimed");
    assert_eq!(claim(&mut db, "t", "not-a-uuid", "h").outcome, "claimed");
    // the ttl decides what is stale
    assert_eq!(
        claim_with(&mut db, "t", &other_old, "h", "1 min", Some("3 days")).outcome,
        "claimed"
    );
}

/// A plain install of the SQL edition has no row in pg_extension: idem_version() is how its
/// owner (and a DBA with either edition) tells which version answers, and so which update to
/// run. Natively it is the library's version.
#[test]
fn idem_version_is_the_version_that_answers() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let version: String = db.query_one("SELECT idem_version()", &[]).unwrap().get(0);
    assert_eq!(version, current_version());
}
