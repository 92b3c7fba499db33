//! Message consumers through real sessions: idem_consume is new once per message and its record
//! goes with the transaction (commit, rollback, a terminated or killed backend); a duplicate in
//! flight waits for the first delivery's transaction and gets the answer it left, within
//! lock_timeout and statement_timeout, with deadlocks detected; batches; keys held by
//! idem_claim; tens of thousands of messages in one transaction without a lock each; expiry and
//! the purge; bad input; idem_complete_many; and a chaos run of consumers that receive every
//! message at least twice, ending with exactly one business effect per message.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pg_idem_tests::*;

fn consume(db: &mut impl GenericClient, tenant: &str, key: &str) -> Result<bool, postgres::Error> {
    db.query_one("SELECT idem_consume($1, $2)", &[&tenant, &key])
        .map(|r| r.get(0))
}

fn consume_many(db: &mut Client, tenant: &str, keys: &[&str]) -> Vec<String> {
    db.column(
        "SELECT k FROM idem_consume_many($1, $2::text[]) AS k",
        &[&tenant, &keys],
    )
}

fn backend_pid(db: &mut impl GenericClient) -> i32 {
    db.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

/// Waits until the backend `pid` waits for a lock.
fn wait_until_waiting(server: &Server, pid: i32) {
    let mut monitor = server.client();
    wait_for("the duplicate to wait", Duration::from_secs(10), || {
        monitor
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
                &[&pid],
            )
            .map(|r| r.get::<_, i64>(0) == 1)
            .unwrap_or(false)
    });
}

#[test]
fn new_once_duplicate_after_and_new_again_after_a_rollback() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let mut tx = db.transaction().unwrap();
    assert!(consume(&mut tx, "t", "m1").unwrap(), "a new message");
    assert!(
        !consume(&mut tx, "t", "m1").unwrap(),
        "the same transaction sees its own record"
    );
    tx.rollback().unwrap();
    assert!(
        consume(&mut db, "t", "m1").unwrap(),
        "rolled back: the message is new again"
    );
    assert!(
        !consume(&mut db, "t", "m1").unwrap(),
        "committed: a duplicate"
    );
    assert!(
        consume(&mut db, "other", "m1").unwrap(),
        "tenants are independent"
    );
    // a consumed message is a completed key under the empty fingerprint
    assert_eq!(claim(&mut db, "t", "m1", "").outcome, "completed");
    assert_eq!(claim(&mut db, "t", "m1", "h").outcome, "mismatch");
    // a key completed or failed through idem_claim was processed
    let c = claim(&mut db, "t", "claimed", "h");
    complete(&mut db, "t", "claimed", c.fence.unwrap(), 200, "{}");
    assert!(!consume(&mut db, "t", "claimed").unwrap());
    let f = claim(&mut db, "t", "failed", "h");
    db.execute(
        "SELECT idem_fail_final('t', 'failed', $1, 500)",
        &[&f.fence],
    )
    .unwrap();
    assert!(!consume(&mut db, "t", "failed").unwrap());
    // shared-memory counters: the native edition's only (idem_tenant_counters has no rows
    // in the SQL edition, as natively without the preload)
    if edition() == Edition::Native {
        let counters: (i64, i64) = db
            .query_one(
                "SELECT consumed, consume_duplicates FROM idem_tenant_counters() WHERE tenant = 't'",
                &[],
            )
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
        // counters count answers, whatever the transaction does afterwards: two answered new
        assert_eq!(counters, (2, 4));
    }
    amcheck(&mut db);
}

/// Runs `second` in a session of its own while `first` (a transaction that wrote what `second`
/// needs) stays open; once that session waits for a lock, and 200 ms more, `first` commits
/// (`commit`) or rolls back. Returns what `second` gave and how long it took.
fn waiting_for<T: Send + 'static>(
    server: &Server,
    first: postgres::Transaction<'_>,
    commit: bool,
    second: impl FnOnce(&mut Client) -> T + Send + 'static,
) -> (T, Duration) {
    let conninfo = server.conninfo("postgres");
    let pid = Arc::new(Mutex::new(0));
    let pid_seen = pid.clone();
    let session = thread::spawn(move || {
        let mut db = Client::connect(&conninfo, NoTls).unwrap();
        *pid_seen.lock().unwrap() = backend_pid(&mut db);
        let started = Instant::now();
        let answer = second(&mut db);
        (answer, started.elapsed())
    });
    wait_for("the second session", Duration::from_secs(10), || {
        *pid.lock().unwrap() != 0
    });
    wait_until_waiting(server, *pid.lock().unwrap());
    thread::sleep(Duration::from_millis(200));
    if commit {
        first.commit().unwrap();
    } else {
        first.rollback().unwrap();
    }
    session.join().unwrap()
}

#[test]
fn a_duplicate_in_flight_waits_for_the_first_delivery() {
    let server = Server::start(&[]);
    for first_commits in [true, false] {
        let key = format!("m-{first_commits}");
        let mut first = server.client();
        let mut tx = first.transaction().unwrap();
        assert!(consume(&mut tx, "t", &key).unwrap());
        let k = key.clone();
        let (answer, waited) =
            waiting_for(&server, tx, first_commits, move |db| consume(db, "t", &k));
        assert_eq!(
            answer.unwrap(),
            !first_commits,
            "after the first delivery's {}",
            if first_commits { "commit" } else { "rollback" }
        );
        assert!(
            waited >= Duration::from_millis(200),
            "it waited: {waited:?}"
        );
    }
    amcheck(&mut server.client());
}

/// A batch that meets a message of another batch still in flight waits for it, and then
/// answers what that transaction left: processed after its commit, new after its rollback;
/// the batch's other keys are new either way, in input order.
#[test]
fn a_batch_waits_for_a_duplicate_in_flight_in_another_batch() {
    let server = Server::start(&[]);
    for first_commits in [true, false] {
        let (x, y, z) = (
            format!("x-{first_commits}"),
            format!("y-{first_commits}"),
            format!("z-{first_commits}"),
        );
        let mut first = server.client();
        let mut tx = first.transaction().unwrap();
        let firsts: Vec<String> = tx.column(
            "SELECT k FROM idem_consume_many('t', $1::text[]) AS k",
            &[&vec![x.as_str(), y.as_str()]],
        );
        assert_eq!(firsts, [x.clone(), y.clone()]);
        let keys = [z.clone(), y.clone(), x.clone()];
        let (answer, waited) = waiting_for(&server, tx, first_commits, move |db| {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            consume_many(db, "t", &keys)
        });
        if first_commits {
            assert_eq!(
                answer,
                std::slice::from_ref(&z),
                "after the first batch's commit"
            );
        } else {
            assert_eq!(answer, [z, y, x], "after the first batch's rollback");
        }
        assert!(
            waited >= Duration::from_millis(200),
            "it waited: {waited:?}"
        );
    }
    amcheck(&mut server.client());
}

#[test]
fn the_wait_obeys_timeouts_and_deadlocks_are_detected() {
    // a server setting (superuser-only in a session): a deadlock is found in 100 ms, not 1 s
    let server = Server::start(&["deadlock_timeout = '100ms'"]);
    let mut first = server.client();
    let mut tx = first.transaction().unwrap();
    assert!(consume(&mut tx, "t", "m").unwrap());
    let mut other = server.client();
    other.batch_execute("SET lock_timeout = '300ms'").unwrap();
    let err = consume(&mut other, "t", "m").unwrap_err();
    assert_eq!(sqlstate(&err), "55P03", "lock_timeout: {err:?}");
    other
        .batch_execute("SET lock_timeout = 0; SET statement_timeout = '300ms'")
        .unwrap();
    let err = consume(&mut other, "t", "m").unwrap_err();
    assert_eq!(sqlstate(&err), "57014", "statement_timeout: {err:?}");
    tx.rollback().unwrap();

    // two consumers take two messages in opposite orders: PostgreSQL detects the deadlock and
    // one of them fails with 40P01; the other goes on
    let barrier = Arc::new(Barrier::new(2));
    let runs: Vec<_> = [("d1", "d2"), ("d2", "d1")]
        .into_iter()
        .map(|(a, b)| {
            let conninfo = server.conninfo("postgres");
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut db = Client::connect(&conninfo, NoTls).unwrap();
                let mut tx = db.transaction().unwrap();
                assert!(consume(&mut tx, "t", a).unwrap());
                barrier.wait();
                let second = consume(&mut tx, "t", b);
                match second {
                    Ok(new) => {
                        tx.commit().unwrap();
                        Ok(new)
                    }
                    Err(e) => Err(sqlstate(&e)),
                }
            })
        })
        .collect();
    let results: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    assert!(
        results.contains(&Err("40P01".to_string())),
        "a deadlock is detected: {results:?}"
    );
    assert!(
        results.iter().any(|r| r.is_ok()),
        "the other consumer goes on: {results:?}"
    );
    amcheck(&mut server.client());
}

#[test]
fn a_terminated_or_killed_first_consumer_leaves_the_message_new() {
    let server = Server::start(&["restart_after_crash = on"]);
    // terminated while a duplicate waits: the duplicate gets the message
    let mut first = server.client();
    let first_pid = backend_pid(&mut first);
    let mut tx = first.transaction().unwrap();
    assert!(consume(&mut tx, "t", "m-term").unwrap());
    let conninfo = server.conninfo("postgres");
    let waiting = thread::spawn(move || {
        let mut db = Client::connect(&conninfo, NoTls).unwrap();
        consume(&mut db, "t", "m-term")
    });
    thread::sleep(Duration::from_millis(300));
    server
        .client()
        .execute("SELECT pg_terminate_backend($1)", &[&first_pid])
        .unwrap();
    drop(tx);
    drop(first);
    assert!(
        waiting.join().unwrap().unwrap(),
        "the first delivery's backend was terminated: the message is new"
    );
    // killed with SIGKILL: the server goes through crash recovery, the record is gone
    let mut victim = server.client();
    let pid = backend_pid(&mut victim);
    let mut tx = victim.transaction().unwrap();
    assert!(consume(&mut tx, "t", "m-kill").unwrap());
    let mut db = server.crash_backend(pid);
    drop(tx);
    drop(victim);
    assert!(consume(&mut db, "t", "m-kill").unwrap());
    assert!(!consume(&mut db, "t", "m-term").unwrap());
    amcheck(&mut db);
}

#[test]
fn batches_answer_the_new_keys_each_once_in_input_order() {
    let server = Server::start(&[]);
    let mut db = server.client();
    assert!(consume(&mut db, "t", "b2").unwrap());
    let new = consume_many(&mut db, "t", &["b1", "b2", "b3", "b1", "b4", "b3"]);
    assert_eq!(new, ["b1", "b3", "b4"]);
    assert!(consume_many(&mut db, "t", &["b1", "b2"]).is_empty());
    assert!(consume_many(&mut db, "t", &[]).is_empty());
    // a batch in a transaction that rolls back leaves nothing
    let mut tx = db.transaction().unwrap();
    tx.query(
        "SELECT * FROM idem_consume_many('t', ARRAY['r1', 'r2'])",
        &[],
    )
    .unwrap();
    tx.rollback().unwrap();
    assert_eq!(consume_many(&mut db, "t", &["r1", "r2"]), ["r1", "r2"]);
}

#[test]
fn keys_held_by_idem_claim() {
    // Decided and documented: a key in progress under a live lease (or claimed by the same
    // transaction) cannot be answered yet: 55P03, and the message is not acknowledged; once
    // the lease has passed, idem_consume takes it over like a claim would, and the old
    // attempt's fence is refused from then on.
    let server = Server::start(&[]);
    let mut db = server.client();
    let live = claim_with(&mut db, "t", "live", "h", "1 hour", None);
    let err = consume(&mut db, "t", "live").unwrap_err();
    assert_eq!(sqlstate(&err), "55P03");
    let expired = claim_with(&mut db, "t", "expired", "h", "1 millisecond", None);
    thread::sleep(Duration::from_millis(20));
    assert!(consume(&mut db, "t", "expired").unwrap(), "taken over");
    assert!(!consume(&mut db, "t", "expired").unwrap());
    let err = try_complete(&mut db, "t", "expired", expired.fence.unwrap(), 200, "{}").unwrap_err();
    assert_eq!(
        sqlstate(&err),
        "55000",
        "the old attempt's fence is refused"
    );
    let mut tx = db.transaction().unwrap();
    claim(&mut tx, "t", "own", "h");
    let err = consume(&mut tx, "t", "own").unwrap_err();
    assert_eq!(sqlstate(&err), "55P03", "this transaction's own attempt");
    drop(tx);
    // ... even once its lease and ttl have passed: its fence must stay good (as for a claim)
    let mut tx = db.transaction().unwrap();
    let own = claim_with(&mut tx, "t", "own-expired", "h", "1 ms", Some("1 ms"));
    thread::sleep(Duration::from_millis(20));
    let mut savepoint = tx.savepoint("consume").unwrap();
    let err = consume(&mut savepoint, "t", "own-expired").unwrap_err();
    assert_eq!(
        sqlstate(&err),
        "55P03",
        "this transaction's own expired attempt"
    );
    savepoint.rollback().unwrap();
    complete(&mut tx, "t", "own-expired", own.fence.unwrap(), 200, "{}");
    tx.commit().unwrap();
    // an uncommitted claim is waited for like an uncommitted consume
    let mut first = server.client();
    let mut tx = first.transaction().unwrap();
    let c = claim(&mut tx, "t", "inflight", "h");
    let conninfo = server.conninfo("postgres");
    let waiting = thread::spawn(move || {
        let mut db = Client::connect(&conninfo, NoTls).unwrap();
        consume(&mut db, "t", "inflight")
    });
    thread::sleep(Duration::from_millis(300));
    complete(&mut tx, "t", "inflight", c.fence.unwrap(), 200, "{}");
    tx.commit().unwrap();
    assert!(!waiting.join().unwrap().unwrap(), "completed by the claim");
    complete(&mut db, "t", "live", live.fence.unwrap(), 200, "{}");
    assert!(!consume(&mut db, "t", "live").unwrap());
}

#[test]
fn twenty_thousand_messages_in_one_transaction_take_no_lock_each() {
    if native_only(
        "the engine's direct heap writes: a consumed message holds no lock-table entry; the SQL \
         edition, like the native SPI path, holds a key lock per message until commit",
    ) {
        return;
    }
    let server = Server::start(&[]);
    let mut db = server.client();
    let mut monitor = server.client();
    let mut tx = db.transaction().unwrap();
    let pid = backend_pid(&mut tx);
    let locks = |monitor: &mut Client| -> i64 {
        monitor
            .query_one("SELECT count(*) FROM pg_locks WHERE pid = $1", &[&pid])
            .unwrap()
            .get(0)
    };
    tx.query_one(
        "SELECT count(idem_consume('t', 'single-' || g)) FROM generate_series(1, 100) AS g",
        &[],
    )
    .unwrap();
    let after_hundred = locks(&mut monitor);
    for batch in 0..20 {
        let new: i64 = tx
            .query_one(
                "SELECT count(*) FROM idem_consume_many('t', ARRAY(SELECT $1 || g FROM generate_series(1, 1000) AS g))",
                &[&format!("batch-{batch}-")],
            )
            .unwrap()
            .get(0);
        assert_eq!(new, 1000);
    }
    let after_all = locks(&mut monitor);
    assert!(
        after_all <= after_hundred,
        "lock-table rows grew with the messages: {after_hundred} after 100, {after_all} after 20,100"
    );
    // another session goes on meanwhile: it consumes other messages and takes locks
    let mut other = server.client();
    assert!(consume(&mut other, "t", "other").unwrap());
    other
        .batch_execute("BEGIN; LOCK TABLE pg_catalog.pg_class IN ACCESS SHARE MODE; COMMIT")
        .unwrap();
    tx.commit().unwrap();
    let stored: i64 = monitor
        .query_one(
            "SELECT count(*) FROM idem.keys WHERE tenant = 't' AND state = 'c'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(stored, 20_101);
    amcheck(&mut monitor);
}

#[test]
fn past_its_ttl_a_message_is_new_and_the_purge_removes_it() {
    let server = Server::start(&[]);
    let mut db = server.client();
    assert!(db
        .query_one("SELECT idem_consume('t', 'short', '50 ms')", &[])
        .unwrap()
        .get::<_, bool>(0));
    assert!(consume(&mut db, "t", "long").unwrap());
    thread::sleep(Duration::from_millis(100));
    assert!(
        consume(&mut db, "t", "short").unwrap(),
        "expired: new again (kept for the default ttl now)"
    );
    db.batch_execute("SELECT idem_consume('t', 'gone', '1 ms')")
        .unwrap();
    thread::sleep(Duration::from_millis(20));
    let purged: i64 = db.query_one("SELECT idem_purge()", &[]).unwrap().get(0);
    assert_eq!(purged, 1);
    assert!(consume(&mut db, "t", "gone").unwrap());
    assert!(!consume(&mut db, "t", "long").unwrap());
}

#[test]
fn bad_input_gets_the_documented_sqlstates() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let long = "k".repeat(300);
    let cases: Vec<(String, &str)> = vec![
        ("SELECT idem_consume(NULL, 'k')".into(), "22004"),
        ("SELECT idem_consume('t', NULL)".into(), "22004"),
        ("SELECT idem_consume('t', '')".into(), "22023"),
        (format!("SELECT idem_consume('t', '{long}')"), "22023"),
        ("SELECT idem_consume('t', 'k', '-1 second')".into(), "22023"),
        ("SELECT idem_consume('t', 'k', '0')".into(), "22023"),
        ("SELECT idem_consume('t', 'k', '101 years')".into(), "22023"),
        ("SELECT * FROM idem_consume_many(NULL, ARRAY['k'])".into(), "22004"),
        ("SELECT * FROM idem_consume_many('t', NULL)".into(), "22004"),
        ("SELECT * FROM idem_consume_many('t', ARRAY['a', NULL])".into(), "22004"),
        (format!("SELECT * FROM idem_consume_many('t', ARRAY['a', '{long}'])"), "22023"),
        ("SELECT * FROM idem_consume_many('t', ARRAY['a'], '-1 day')".into(), "22023"),
        (
            "SELECT * FROM idem_consume_many('t', ARRAY(SELECT 'k' || g FROM generate_series(1, 1001) AS g))".into(),
            "54000",
        ),
        ("SELECT * FROM idem_complete_many('t', ARRAY['a'], ARRAY[1, 2], ARRAY[200])".into(), "22023"),
        ("SELECT * FROM idem_complete_many('t', ARRAY['a'], ARRAY[NULL::bigint], ARRAY[200])".into(), "22004"),
        ("SELECT * FROM idem_complete_many('t', ARRAY['a'], ARRAY[1], NULL)".into(), "22004"),
        ("SELECT * FROM idem_complete_many('t', ARRAY['a'], ARRAY[1], ARRAY[200], ARRAY['{}', '{}']::jsonb[])".into(), "22023"),
    ];
    for (sql, expected) in cases {
        let err = db.batch_execute(&sql).unwrap_err();
        assert_eq!(sqlstate(&err), expected, "{sql}: {err:?}");
    }
    let stored: i64 = db
        .query_one("SELECT count(*) FROM idem.keys", &[])
        .unwrap()
        .get(0);
    assert_eq!(stored, 0, "nothing stored by a refused call");
}

#[test]
fn complete_many_is_all_or_nothing() {
    let server = Server::start(&[]);
    let mut db = server.client();
    db.batch_execute("CREATE TABLE orders (key text)").unwrap();
    let claim_batch = |db: &mut Client, keys: &[&str]| -> Vec<i64> {
        db.column(
            "SELECT fence FROM idem_claim_many('t', $1::text[], array_fill(''::text, ARRAY[cardinality($1::text[])]))",
            &[&keys],
        )
    };
    let fences = claim_batch(&mut db, &["a", "b", "c"]);
    let rows = db
        .query(
            "SELECT key, expires_at > now() FROM idem_complete_many('t', ARRAY['a', 'b', 'c'], $1, ARRAY[200, 201, 202], \
             ARRAY['{\"n\": 1}', NULL, '{\"n\": 3}']::jsonb[])",
            &[&fences],
        )
        .unwrap();
    let keys: Vec<(String, bool)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        keys,
        [("a".into(), true), ("b".into(), true), ("c".into(), true)]
    );
    let replay = claim(&mut db, "t", "c", "");
    assert_eq!(
        (
            replay.outcome.as_str(),
            replay.response_code,
            replay.response_body.as_deref()
        ),
        ("completed", Some(202), Some(r#"{"n": 3}"#))
    );
    // one stale fence in the batch: 55000 naming the key, and nothing of the batch is stored,
    // nor the business writes of the transaction
    let fences = claim_batch(&mut db, &["d", "e", "f"]);
    let mut tx = db.transaction().unwrap();
    tx.execute("INSERT INTO orders VALUES ('d'), ('e'), ('f')", &[])
        .unwrap();
    let bad = vec![fences[0], fences[1] + 1000, fences[2]];
    let err = tx
        .query(
            "SELECT * FROM idem_complete_many('t', ARRAY['d', 'e', 'f'], $1, ARRAY[200, 200, 200])",
            &[&bad],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
    let message = err
        .as_db_error()
        .map(|e| e.message().to_string())
        .unwrap_or_default();
    assert!(
        message.contains("\"e\""),
        "the message names the key: {message}"
    );
    drop(tx);
    for key in ["d", "e", "f"] {
        assert_eq!(claim(&mut db, "t", key, "").outcome, "in_progress", "{key}");
    }
    let orders: i64 = db
        .query_one("SELECT count(*) FROM orders", &[])
        .unwrap()
        .get(0);
    assert_eq!(orders, 0);
    let err = db
        .query(
            "SELECT * FROM idem_complete_many('t', ARRAY['nope'], ARRAY[1], ARRAY[200])",
            &[],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "P0002");
    // a key twice in one batch: its second completion is refused (already completed)
    let err = db
        .query(
            "SELECT * FROM idem_complete_many('t', ARRAY['d', 'd'], $1, ARRAY[200, 200])",
            &[&vec![fences[0], fences[0]]],
        )
        .unwrap_err();
    assert_eq!(sqlstate(&err), "55000");
    amcheck(&mut db);
}

#[test]
fn at_repeatable_read_a_consume_committed_after_the_snapshot_is_a_serialization_failure() {
    let server = Server::start(&[]);
    let mut a = server.client();
    let mut tx = a
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .start()
        .unwrap();
    tx.query_one("SELECT 1", &[]).unwrap();
    assert!(consume(&mut server.client(), "t", "m").unwrap());
    let err = consume(&mut tx, "t", "m").unwrap_err();
    assert_eq!(sqlstate(&err), "40001");
    drop(tx);
    assert!(!consume(&mut a, "t", "m").unwrap(), "retried: a duplicate");
}

#[test]
fn on_the_spi_path_too() {
    // a trigger on idem.keys sends consumes through SQL statements: same answers, the same
    // wait for a duplicate in flight
    let server = Server::start(&[]);
    server
        .client()
        .batch_execute(
            "CREATE FUNCTION public.noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
             CREATE TRIGGER noop BEFORE INSERT ON idem.keys FOR EACH ROW EXECUTE FUNCTION public.noop();",
        )
        .unwrap();
    let mut db = server.client();
    assert!(consume(&mut db, "t", "s1").unwrap());
    assert!(!consume(&mut db, "t", "s1").unwrap());
    assert_eq!(consume_many(&mut db, "t", &["s1", "s2", "s2"]), ["s2"]);
    let mut first = server.client();
    let mut tx = first.transaction().unwrap();
    assert!(consume(&mut tx, "t", "s3").unwrap());
    let conninfo = server.conninfo("postgres");
    let waiting = thread::spawn(move || {
        let mut db = Client::connect(&conninfo, NoTls).unwrap();
        consume(&mut db, "t", "s3")
    });
    thread::sleep(Duration::from_millis(300));
    tx.rollback().unwrap();
    assert!(waiting.join().unwrap().unwrap());
    let live = claim_with(&mut db, "t", "held", "h", "1 hour", None);
    assert_eq!(
        sqlstate(&consume(&mut db, "t", "held").unwrap_err()),
        "55P03"
    );
    complete(&mut db, "t", "held", live.fence.unwrap(), 200, "{}");
    assert!(!consume(&mut db, "t", "held").unwrap());
}

#[test]
fn every_message_has_exactly_one_effect_under_redelivery_rollbacks_and_kills() {
    // Consumers receive every message at least twice (redeliveries of the same message id
    // arrive while the first is in flight and after it), roll back now and then, and have
    // their backends terminated at random; a message whose consume failed or rolled back is
    // redelivered until it is acknowledged. In the end every message has exactly one effect.
    let server = Server::start(&[]);
    let mut setup = server.client();
    setup
        .batch_execute("CREATE TABLE effects (message text, consumer int)")
        .unwrap();
    const MESSAGES: usize = 600;
    const CONSUMERS: usize = 6;
    let queue: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new(
        (0..MESSAGES)
            .flat_map(|m| [m, m, (m + 7) % MESSAGES])
            .collect(),
    ));
    let acked: Arc<Mutex<HashMap<usize, usize>>> = Arc::default();
    let terminated = Arc::new(AtomicU64::new(0));
    let rolled_back = Arc::new(AtomicU64::new(0));
    let unexpected: Arc<Mutex<Vec<String>>> = Arc::default();
    let pids: Arc<Mutex<Vec<i32>>> = Arc::default();
    let workers: Vec<_> = (0..CONSUMERS)
        .map(|c| {
            let conninfo = server.conninfo("postgres");
            let (queue, acked, rolled_back, unexpected, pids) = (
                queue.clone(),
                acked.clone(),
                rolled_back.clone(),
                unexpected.clone(),
                pids.clone(),
            );
            thread::spawn(move || {
                let mut db = Client::connect(&conninfo, NoTls).unwrap();
                pids.lock().unwrap().push(backend_pid(&mut db));
                let mut n = c as u64 * 7919 + 1;
                loop {
                    let Some(message) = queue.lock().unwrap().pop() else {
                        break;
                    };
                    n = n
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let roll_back = n >> 60 == 0;
                    let key = format!("msg-{message}");
                    let outcome = (|| -> Result<bool, postgres::Error> {
                        let mut tx = db.transaction()?;
                        let new = consume(&mut tx, "chaos", &key)?;
                        if new {
                            tx.execute(
                                "INSERT INTO effects VALUES ($1, $2)",
                                &[&key, &(c as i32)],
                            )?;
                        }
                        thread::sleep(Duration::from_micros(n % 2000));
                        if roll_back {
                            tx.rollback()?;
                            return Ok(false);
                        }
                        tx.commit()?;
                        Ok(true)
                    })();
                    match outcome {
                        Ok(true) => {
                            *acked.lock().unwrap().entry(message).or_default() += 1;
                        }
                        Ok(false) => {
                            rolled_back.fetch_add(1, Ordering::Relaxed);
                            queue.lock().unwrap().insert(0, message);
                        }
                        Err(e) => {
                            let state = sqlstate(&e);
                            if !(e.is_closed()
                                || state.starts_with("57")
                                || state.is_empty()
                                || state == "40P01")
                            {
                                unexpected.lock().unwrap().push(format!("{key}: {e:?}"));
                            }
                            // not acknowledged: redelivered
                            queue.lock().unwrap().insert(0, message);
                            if e.is_closed() || state.starts_with("57") {
                                db = Client::connect(&conninfo, NoTls).unwrap();
                                pids.lock().unwrap().push(backend_pid(&mut db));
                            } else {
                                let _ = db.batch_execute("ROLLBACK");
                            }
                        }
                    }
                }
            })
        })
        .collect();
    let mut admin = server.client();
    let mut n = 0u64;
    while !workers.iter().all(|w| w.is_finished()) {
        thread::sleep(Duration::from_millis(150));
        n += 1;
        let victim = {
            let pids = pids.lock().unwrap();
            pids.get((n as usize * 31) % pids.len().max(1)).copied()
        };
        if let Some(pid) = victim {
            if n.is_multiple_of(3)
                && admin
                    .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                    .map(|r| r.get::<_, bool>(0))
                    .unwrap_or(false)
            {
                terminated.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    for w in workers {
        w.join().unwrap();
    }
    let unexpected = unexpected.lock().unwrap();
    assert!(
        unexpected.is_empty(),
        "unexpected errors:\n{}",
        unexpected.join("\n")
    );
    let effects: Vec<(String, i64)> = admin
        .query(
            "SELECT message, count(*) FROM effects GROUP BY message ORDER BY message",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(effects.len(), MESSAGES, "every message had an effect");
    let twice: Vec<_> = effects.iter().filter(|(_, n)| *n != 1).collect();
    assert!(
        twice.is_empty(),
        "messages with more than one effect: {twice:?}"
    );
    let consumed: i64 = admin
        .query_one(
            "SELECT count(*) FROM idem.keys WHERE tenant = 'chaos' AND state = 'c'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(consumed, MESSAGES as i64);
    println!(
        "{} deliveries acknowledged, {} rolled back, {} backends terminated",
        acked.lock().unwrap().values().sum::<usize>(),
        rolled_back.load(Ordering::Relaxed),
        terminated.load(Ordering::Relaxed)
    );
    assert!(
        terminated.load(Ordering::Relaxed) > 0,
        "no backend was terminated"
    );
    assert!(
        rolled_back.load(Ordering::Relaxed) > 0,
        "nothing rolled back"
    );
    amcheck(&mut admin);
}

/// A batch counts each answer as single calls would: new messages, duplicates (a key repeated
/// in the batch included), takeovers, and, when a key held by an attempt stops it, what it
/// answered before that key and the in_progress that stopped it.
#[test]
fn batches_count_every_answer() {
    if native_only("shared-memory counters (idem_tenant_counters)") {
        return;
    }
    let server = Server::start(&[]);
    let mut db = server.client();
    let counters = |db: &mut Client, tenant: &str| -> Vec<i64> {
        db.query_one(
            "SELECT consumed, consume_duplicates, takeovers, in_progress \
               FROM idem_tenant_counters() WHERE tenant = $1",
            &[&tenant],
        )
        .map(|r| (0..4).map(|i| r.get(i)).collect())
        .unwrap_or_default()
    };
    assert!(consume(&mut db, "tally", "old").unwrap());
    // a claim whose lease passed: the batch takes it over
    claim_with(&mut db, "tally", "stalled", "", "1 ms", None);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let new = consume_many(&mut db, "tally", &["a", "old", "b", "a", "stalled"]);
    assert_eq!(new, ["a", "b", "stalled"]);
    // consumed 1 + 3, duplicates 2 (old, the repeated a), one takeover
    assert_eq!(counters(&mut db, "tally"), [4, 2, 1, 0]);
    // a committed claim under a live lease stops the next batch at its key: c and the
    // duplicate b were answered first
    claim_with(&mut db, "tally", "held", "", "10 min", None);
    let stopped = db.query(
        "SELECT k FROM idem_consume_many('tally', ARRAY['c', 'b', 'held', 'd']) AS k",
        &[],
    );
    assert_eq!(
        stopped.map_err(|e| sqlstate(&e)).err().as_deref(),
        Some("55P03")
    );
    assert_eq!(counters(&mut db, "tally"), [5, 3, 1, 1]);
}
