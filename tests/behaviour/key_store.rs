//! The key store at engine level (src/store/engine/, src/pg/heap/), through real sessions:
//! claims held open in many transactions take no lock-table entry per key, an attempt in flight
//! is answered `in_progress` at once however it is in flight, and a fenced write that waited
//! for another transaction checks its fence again on the row that transaction left.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use pg_idem_tests::*;

/// Lock-table rows (pg_locks) held by the backend `pid`.
fn locks_of(monitor: &mut Client, pid: i32) -> i64 {
    monitor
        .query_one("SELECT count(*) FROM pg_locks WHERE pid = $1", &[&pid])
        .unwrap()
        .get(0)
}

fn backend_pid(db: &mut impl GenericClient) -> i32 {
    db.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

fn fence(c: &Claim) -> i64 {
    c.fence.expect("a fence")
}

/// Claims `n` fresh keys one by one (`idem_claim`) or in one batch (`idem_claim_many`), in the
/// transaction `tx`; returns how many were claimed.
fn try_claim_fresh(
    tx: &mut impl GenericClient,
    prefix: &str,
    n: i32,
    batch: bool,
) -> Result<i64, postgres::Error> {
    let sql = if batch {
        "SELECT count(*) FROM idem_claim_many('t', \
           ARRAY(SELECT $1 || g FROM generate_series(1, $2) AS g), \
           pg_catalog.array_fill('h'::text, ARRAY[$2])) AS c \
         WHERE c.outcome = 'claimed'"
    } else {
        "SELECT count(*) FROM generate_series(1, $2) AS g, idem_claim('t', $1 || g, 'h') AS c \
         WHERE c.outcome = 'claimed'"
    };
    tx.query_one(sql, &[&prefix, &n]).map(|row| row.get(0))
}

/// `sessions` sessions each claim `per_session` keys in one open transaction; while all are
/// open, each holds as many lock-table rows as after its first 10 claims, and another session
/// can still take locks. Then all commit and every key is there.
fn claim_open(server: &Server, sessions: usize, per_session: i32, batch: bool) {
    let barrier = Arc::new(Barrier::new(sessions + 1));
    let done = Arc::new(Barrier::new(sessions + 1));
    let workers: Vec<_> = (0..sessions)
        .map(|s| {
            let conninfo = server.conninfo("postgres");
            let (barrier, done) = (barrier.clone(), done.clone());
            thread::spawn(move || {
                let mut db = Client::connect(&conninfo, NoTls).unwrap();
                let mut monitor = Client::connect(&conninfo, NoTls).unwrap();
                let mut tx = db.transaction().unwrap();
                let pid = backend_pid(&mut tx);
                let prefix = format!("open-{batch}-{s}-");
                // errors are kept until every session has met at the barriers, so that one
                // failing session fails the test instead of leaving the others waiting
                let first = try_claim_fresh(&mut tx, &format!("{prefix}first-"), 10, batch);
                let after_ten = locks_of(&mut monitor, pid);
                let claimed = try_claim_fresh(&mut tx, &prefix, per_session, batch);
                barrier.wait(); // every session has claimed its keys and still holds them
                let after_all = locks_of(&mut monitor, pid);
                done.wait(); // the main thread has checked the server meanwhile
                assert_eq!(first.expect("the first claims"), 10, "session {s}");
                assert_eq!(
                    claimed.expect("the claims"),
                    i64::from(per_session),
                    "session {s}"
                );
                tx.commit().unwrap();
                (after_ten, after_all)
            })
        })
        .collect();
    barrier.wait();
    // every other session of the server can still take locks and claim
    let mut other = server.client();
    let mut tx = other.transaction().unwrap();
    let others = try_claim_fresh(&mut tx, &format!("other-{batch}-"), 100, false);
    let locked = tx.execute("LOCK TABLE pg_catalog.pg_class IN ACCESS SHARE MODE", &[]);
    tx.commit().unwrap();
    done.wait();
    assert_eq!(others.expect("claims of another session"), 100);
    locked.expect("another session takes a lock");
    for worker in workers {
        let (after_ten, after_all) = worker.join().unwrap();
        assert!(
            after_all <= after_ten,
            "lock-table rows grew with the keys claimed: {after_ten} after 10 claims, {after_all} after {per_session} more"
        );
    }
    let expected = sessions as i64 * i64::from(per_session + 10) + 100;
    let stored: i64 = server
        .client()
        .query_one(
            "SELECT count(*) FROM idem.keys WHERE key LIKE $1 OR key LIKE $2",
            &[&format!("open-{batch}-%"), &format!("other-{batch}-%")],
        )
        .unwrap()
        .get(0);
    assert_eq!(stored, expected);
}

#[test]
fn a_hundred_thousand_open_claims_take_no_lock_per_key() {
    if native_only(
        "the engine's direct heap writes: a claimed key holds no lock-table entry; the SQL \
         edition, like the native SPI path, holds a key lock per claimed key until commit \
         (docs/caveats.md)",
    ) {
        return;
    }
    // default max_locks_per_transaction (64): room for about 6,400 locks in the whole server,
    // which one lock per claimed key would exhaust 15 times over (53200 out of shared memory)
    let server = Server::start(&[]);
    claim_open(&server, 4, 25_000, false);
    claim_open(&server, 16, 1_000, true);
}

/// Runs `sql` in a new session with a lock_timeout, and returns its first column and how long
/// it took: an answer that waited for another transaction would fail with 55P03.
fn answer_at_once(server: &Server, sql: &str) -> (String, Duration) {
    let mut db = server.client();
    db.batch_execute("SET lock_timeout = '2s'").unwrap();
    let started = Instant::now();
    let row = db
        .query_one(sql, &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    (row.get(0), started.elapsed())
}

#[test]
fn an_attempt_in_flight_is_in_progress_at_once() {
    let server = Server::start(&[]);
    let mut setup = server.client();
    // k-taken: a committed claim whose lease has passed; k-done: a completed key
    let expired = claim_with(&mut setup, "t", "k-taken", "h", "1 millisecond", None);
    assert_eq!(expired.outcome, "claimed");
    let done = claim(&mut setup, "t", "k-forgotten", "h");
    complete(&mut setup, "t", "k-forgotten", fence(&done), 200, "{}");
    thread::sleep(Duration::from_millis(20));

    let ask = |key: &str| {
        answer_at_once(
            &server,
            &format!("SELECT outcome FROM idem_claim('t', '{key}', 'h')"),
        )
    };
    // in flight: an uncommitted insert, an uncommitted takeover, an uncommitted forget
    let mut a = server.client();
    let mut tx = a.transaction().unwrap();
    assert_eq!(claim(&mut tx, "t", "k-new", "h").outcome, "claimed");
    let takeover = claim(&mut tx, "t", "k-taken", "h");
    assert_eq!(
        (takeover.outcome.as_str(), takeover.attempt),
        ("claimed", Some(2))
    );
    tx.execute("SELECT idem_forget('t', 'k-forgotten')", &[])
        .unwrap();
    for key in ["k-new", "k-taken"] {
        let (outcome, took) = ask(key);
        assert_eq!(outcome, "in_progress", "{key}");
        assert!(took < Duration::from_secs(1), "{key}: waited {took:?}");
    }
    // the forget is in flight: the completed row is still what everyone else sees
    assert_eq!(ask("k-forgotten").0, "completed");
    // this transaction's own attempts stay its own
    assert_eq!(claim(&mut tx, "t", "k-new", "h").outcome, "in_progress");
    assert_eq!(claim(&mut tx, "t", "k-taken", "h").outcome, "in_progress");
    tx.rollback().unwrap();
    // rolled back: the new key is free, the taken-over one is back to its expired lease
    assert_eq!(ask("k-new").0, "claimed");
    let (outcome, _) = answer_at_once(
        &server,
        "SELECT outcome || ':' || attempt FROM idem_claim('t', 'k-taken', 'h')",
    );
    assert_eq!(outcome, "claimed:2");
}

#[test]
fn a_fenced_write_that_waited_checks_its_fence_again() {
    let server = Server::start(&[]);
    for taker_commits in [true, false] {
        let key = format!("k-{taker_commits}");
        let mut setup = server.client();
        let first = claim_with(&mut setup, "t", &key, "h", "1 millisecond", None);
        thread::sleep(Duration::from_millis(20));
        // a second attempt takes the key over and keeps its transaction open
        let mut b = server.client();
        let mut tx = b.transaction().unwrap();
        let second = claim(&mut tx, "t", &key, "h");
        assert_eq!(second.attempt, Some(2));
        // the first attempt completes meanwhile: it waits for the takeover's transaction
        let conninfo = server.conninfo("postgres");
        let (k, f) = (key.clone(), fence(&first));
        let completing = thread::spawn(move || {
            let mut a = Client::connect(&conninfo, NoTls).unwrap();
            try_complete(&mut a, "t", &k, f, 200, r#"{"by": "first"}"#)
        });
        let mut monitor = server.client();
        wait_for("the completion to wait", Duration::from_secs(10), || {
            let waiting: i64 = monitor
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                      WHERE wait_event_type = 'Lock' AND query LIKE '%idem_complete%'",
                    &[],
                )
                .unwrap()
                .get(0);
            waiting == 1
        });
        if taker_commits {
            tx.commit().unwrap();
            let err = completing.join().unwrap().unwrap_err();
            assert_eq!(sqlstate(&err), "55000", "a stale fence after waiting");
        } else {
            tx.rollback().unwrap();
            completing
                .join()
                .unwrap()
                .expect("the fence holds again after the rollback");
        }
        let row = setup
            .query_one(
                "SELECT state::text, fence FROM idem.keys WHERE key = $1",
                &[&key],
            )
            .unwrap();
        let (state, stored_fence): (String, i64) = (row.get(0), row.get(1));
        if taker_commits {
            assert_eq!((state.as_str(), stored_fence), ("p", fence(&second)));
        } else {
            assert_eq!((state.as_str(), stored_fence), ("c", fence(&first)));
        }
    }
}

#[test]
fn fenced_writes_at_repeatable_read_fail_on_a_concurrent_change() {
    let server = Server::start(&[]);
    let mut setup = server.client();
    let first = claim(&mut setup, "t", "k", "h");
    let mut a = server.client();
    let mut tx = a
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .start()
        .unwrap();
    tx.query_one("SELECT 1", &[]).unwrap(); // take the snapshot
    setup
        .execute(
            "SELECT idem_heartbeat('t', 'k', $1, interval '1 hour')",
            &[&fence(&first)],
        )
        .unwrap();
    let err = try_complete(&mut tx, "t", "k", fence(&first), 200, "{}").unwrap_err();
    assert_eq!(sqlstate(&err), "40001");
    drop(tx);
    // retried, the completion goes through
    complete(&mut a, "t", "k", fence(&first), 200, "{}");
}

/// Advisory locks (pg_idem's key locks) held by the backend `pid`.
fn key_locks_of(monitor: &mut Client, pid: i32) -> i64 {
    monitor
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND objsubid = 478",
            &[&pid],
        )
        .unwrap()
        .get(0)
}

#[test]
fn an_idem_keys_the_engine_cannot_write_takes_the_spi_path() {
    if native_only("the engine's choice between its direct heap writes and the SPI path") {
        return;
    }
    // A trigger on idem.keys (Citus adds some to distributed tables; a DBA might audit): the
    // engine would skip it, so the same backend switches to the SPI path, whose INSERT fires
    // it, and back once the trigger is gone.
    let server = Server::start(&[]);
    let mut admin = server.client();
    let mut db = server.client();
    let pid = backend_pid(&mut db);
    let claim_open = |db: &mut Client, key: &str| -> (i64, i64) {
        let mut tx = db.transaction().unwrap();
        assert_eq!(claim(&mut tx, "t", key, "h").outcome, "claimed");
        let held = key_locks_of(&mut server.client(), pid);
        tx.commit().unwrap();
        let audited: i64 = server
            .client()
            .query_one("SELECT count(*) FROM public.audit", &[])
            .unwrap()
            .get(0);
        (held, audited)
    };
    admin
        .batch_execute(
            "CREATE TABLE public.audit (key text);
             CREATE FUNCTION public.audit_key() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN INSERT INTO public.audit VALUES (NEW.key); RETURN NEW; END $$;",
        )
        .unwrap();
    // pg_idem's own trigger (lift_fence_clock: restored fences lift the fence clock) is the
    // one the engine accepts
    let own: Vec<String> = admin
        .query(
            "SELECT tgname::text FROM pg_catalog.pg_trigger WHERE tgrelid = 'idem.keys'::regclass",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(own, ["lift_fence_clock"]);
    assert_eq!(claim_open(&mut db, "before"), (0, 0), "engine path");
    admin
        .batch_execute(
            "CREATE TRIGGER audit AFTER INSERT ON idem.keys FOR EACH ROW EXECUTE FUNCTION public.audit_key()",
        )
        .unwrap();
    assert_eq!(
        claim_open(&mut db, "with-trigger"),
        (1, 1),
        "SPI path: the trigger fired, the key lock was held until commit"
    );
    admin
        .batch_execute("DROP TRIGGER audit ON idem.keys")
        .unwrap();
    assert_eq!(claim_open(&mut db, "after"), (0, 1), "engine path again");
}

#[test]
fn engine_writes_reach_logical_decoding_and_survive_a_crash() {
    // The engine writes through heap_insert/heap_update/heap_delete, which log WAL as the
    // executor's statements do: logical decoding shows the same row changes, and crash
    // recovery (immediate stop: no shutdown checkpoint) replays them.
    let server = Server::start(&["wal_level = logical", "max_replication_slots = 2"]);
    let mut db = server.client();
    db.batch_execute(
        "SELECT pg_create_logical_replication_slot('idem', 'test_decoding');
         ALTER TABLE idem.keys REPLICA IDENTITY DEFAULT;",
    )
    .unwrap();
    let mut tx = db.transaction().unwrap();
    let kept = claim(&mut tx, "t", "kept", "h");
    complete(&mut tx, "t", "kept", fence(&kept), 201, r#"{"id": 7}"#);
    let dropped = claim(&mut tx, "t", "dropped", "h");
    tx.execute(
        "SELECT idem_release('t', 'dropped', $1)",
        &[&fence(&dropped)],
    )
    .unwrap();
    tx.commit().unwrap();
    let changes: Vec<String> = db.column(
        "SELECT data FROM pg_logical_slot_get_changes('idem', NULL, NULL) \
              WHERE data LIKE 'table idem.keys:%'",
        &[],
    );
    let kinds: Vec<&str> = changes
        .iter()
        .map(|c| c.split(':').nth(1).unwrap_or("").trim())
        .collect();
    assert_eq!(
        kinds,
        ["INSERT", "UPDATE", "INSERT", "DELETE"],
        "{changes:#?}"
    );
    assert!(
        changes[1].contains("state[\"char\"]:'c'")
            && changes[1].contains("response_code[integer]:201"),
        "the completion as decoded: {}",
        changes[1]
    );
    assert!(changes[3].contains("key[text]:'dropped'"), "{}", changes[3]);

    // committed engine writes survive crash recovery
    let mut tx = db.transaction().unwrap();
    let later = claim(&mut tx, "t", "later", "h");
    tx.commit().unwrap();
    server.stop("immediate");
    server.start_again();
    let mut db = server.client();
    assert_eq!(claim(&mut db, "t", "kept", "h").outcome, "completed");
    assert_eq!(claim(&mut db, "t", "dropped", "h").outcome, "claimed");
    let again = claim(&mut db, "t", "later", "h");
    assert_eq!(again.outcome, "in_progress");
    complete(&mut db, "t", "later", fence(&later), 200, "{}");
    let checked: i64 = db
        .query_one(
            "SELECT count(*) FROM idem.keys AS k \
              WHERE k.key IN ('kept', 'dropped', 'later')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(checked, 3);
}

/// The heap tuple of `key` in idem.keys as the page holds it: (number of attributes, t_hoff).
fn stored_tuple(db: &mut Client, key: &str) -> (i32, i32) {
    let mut checker = superuser_twin(db);
    let db = checker.as_mut().unwrap_or(db);
    db.batch_execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        .unwrap();
    let row = db
        .query_one(
            "SELECT p.t_infomask2 & 2047, p.t_hoff::int
               FROM idem.keys AS k,
                    heap_page_items(get_raw_page('idem.keys', (k.ctid::text::point)[0]::int)) AS p
              WHERE k.key = $1 AND p.lp = (k.ctid::text::point)[1]::int",
            &[&key],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn the_engine_leaves_a_rows_trailing_nulls_off() {
    if native_only("the engine's own heap writes (the executor forms every column)") {
        return;
    }
    // A consumed message has nothing past its key (sql/schema.sql's eighth column): written
    // without the seven NULLs that follow, its null bitmap fits the header's spare byte and
    // its data starts at byte 24, not 32. A request key keeps its columns up to its last value.
    // Every reader takes the columns left off for NULL.
    let server = Server::start(&[]);
    let mut db = server.client();
    let consumed: bool = db
        .query_one(
            "SELECT idem_consume('t', 'message', interval '1 hour')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(consumed);
    let first = claim(&mut db, "t", "request", "h");
    complete(&mut db, "t", "request", fence(&first), 201, r#"{"id": 7}"#);
    assert_eq!(stored_tuple(&mut db, "message"), (8, 24), "a message row");
    // up to response_body, the thirteenth column; 13 columns need a second bitmap byte
    assert_eq!(
        stored_tuple(&mut db, "request"),
        (13, 32),
        "a completed request"
    );
    let nulls: bool = db
        .query_one(
            "SELECT attempt IS NULL AND response_code IS NULL AND lease_expires_at IS NULL
                    AND request_hash IS NULL AND response_body IS NULL
                    AND checkpoint_phase IS NULL AND checkpoint_data IS NULL
               FROM idem.keys WHERE key = 'message'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(nulls, "the columns left off read as NULL");
    let again: bool = db
        .query_one(
            "SELECT idem_consume('t', 'message', interval '1 hour')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(!again, "the message was processed");
    // a checkpoint fills a column past the others: the row grows to it (an update)
    let second = claim(&mut db, "t", "stalled", "h");
    db.execute(
        "SELECT idem_checkpoint('t', 'stalled', $1, 'charged', '{\"step\": 1}')",
        &[&fence(&second)],
    )
    .unwrap();
    assert_eq!(stored_tuple(&mut db, "stalled").0, 15);
    amcheck(&mut db);
}

#[test]
fn a_column_with_a_missing_value_is_always_written() {
    // A column added with a default keeps that default as its "missing" value (atthasmissing)
    // after the default is dropped: a row that ends before the column reads it, not NULL. A DBA
    // who dropped and added back one of pg_idem's columns that way has a table pg_idem still
    // writes (the same names and types, no default), so every new row must carry the column.
    let server = Server::start(&[]);
    let mut db = server.client();
    db.batch_execute(
        "ALTER TABLE idem.keys DROP COLUMN checkpoint_data;
         ALTER TABLE idem.keys ADD COLUMN checkpoint_data jsonb DEFAULT '{\"stale\": true}';
         ALTER TABLE idem.keys ALTER COLUMN checkpoint_data DROP DEFAULT;",
    )
    .unwrap();
    let missing: bool = db
        .query_one(
            "SELECT atthasmissing FROM pg_catalog.pg_attribute
              WHERE attrelid = 'idem.keys'::regclass AND attname = 'checkpoint_data'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(missing, "the column has a missing value");
    let consumed: bool = db
        .query_one(
            "SELECT idem_consume('t', 'message', interval '1 hour')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(consumed);
    let first = claim(&mut db, "t", "request", "h");
    complete(&mut db, "t", "request", fence(&first), 200, "{}");
    let stale: Vec<String> = db.column(
        "SELECT key FROM idem.keys WHERE checkpoint_data IS NOT NULL ORDER BY key",
        &[],
    );
    assert!(
        stale.is_empty(),
        "rows that read the missing value: {stale:?}"
    );
    amcheck(&mut db);
}

#[test]
fn every_index_entry_the_engine_writes_is_where_amcheck_expects_it() {
    // amcheck's heapallindexed check fingerprints every heap tuple and looks for its index
    // entry: a missing entry (an update wrongly taken for HOT, an index skipped) or a wrong one
    // fails it. The workload covers inserts, HOT updates (complete, heartbeat, checkpoint),
    // non-HOT updates (a takeover that lowers purge_after, an indexed column), deletes, and a
    // key claimed again after being deleted.
    let server = Server::start(&[]);
    let mut db = server.client();
    for i in 0..300 {
        let key = format!("k{i}");
        let first = claim_with(&mut db, "t", &key, "h", "1 millisecond", Some("1 day"));
        match i % 5 {
            0 => complete(&mut db, "t", &key, fence(&first), 200, r#"{"ok": true}"#),
            1 => {
                db.execute(
                    "SELECT idem_heartbeat('t', $1, $2, interval '1 hour')",
                    &[&key, &fence(&first)],
                )
                .unwrap();
            }
            2 => {
                db.execute(
                    "SELECT idem_checkpoint('t', $1, $2, 'charged', '{\"step\": 1}')",
                    &[&key, &fence(&first)],
                )
                .unwrap();
            }
            3 => {
                thread::sleep(Duration::from_millis(2));
                // a takeover with a shorter ttl moves purge_after down: not HOT
                let second = claim_with(&mut db, "t", &key, "h", "1 minute", Some("1 hour"));
                assert_eq!(second.attempt, Some(2));
                complete(&mut db, "t", &key, fence(&second), 200, "{}");
            }
            _ => {
                db.execute("SELECT idem_forget('t', $1)", &[&key]).unwrap();
                assert_eq!(claim(&mut db, "t", &key, "h").outcome, "claimed");
            }
        }
    }
    // bt_index_parent_check(heapallindexed) on both indexes, and verify_heapam
    amcheck(&mut db);
}

#[test]
fn a_read_only_transaction_reads_keys_and_writes_none() {
    // as the executor refuses INSERT, UPDATE and DELETE there: 25006, whatever the key holds;
    // answers that only read (a replay) still work
    let server = Server::start(&[]);
    let mut db = server.client();
    let done = claim(&mut db, "t", "done", "h");
    complete(&mut db, "t", "done", fence(&done), 200, "{}");
    let open = claim(&mut db, "t", "open", "h");
    let calls = [
        "SELECT outcome FROM idem_claim('t', 'fresh', 'h')".to_string(),
        format!("SELECT idem_complete('t', 'open', {}, 200)", fence(&open)),
        "SELECT idem_complete('t', 'missing', 1, 200)".to_string(),
        format!("SELECT idem_heartbeat('t', 'open', {})", fence(&open)),
        format!("SELECT idem_assert_fence('t', 'open', {})", fence(&open)),
        "SELECT idem_forget('t', 'missing')".to_string(),
    ];
    for sql in calls {
        let mut tx = db.build_transaction().read_only(true).start().unwrap();
        assert_eq!(
            claim(&mut tx, "t", "done", "h").outcome,
            "completed",
            "a replay in a read-only transaction"
        );
        let err = tx.query_one(sql.as_str(), &[]).unwrap_err();
        assert_eq!(sqlstate(&err), "25006", "{sql}");
    }
}

#[test]
fn a_pooled_session_survives_the_extension_being_dropped_and_created_again() {
    if native_only(
        "the library's per-backend caches (idem.keys' OID, result descriptors) across DROP and \
         CREATE EXTENSION; the SQL edition keeps no such cache",
    ) {
        return;
    }
    // A connection pool keeps its sessions while a DBA drops and re-creates pg_idem: the
    // session's next call finds the new idem.keys (a new OID), its functions' new result
    // descriptors, and no answer cached from the old extension.
    let server = Server::start(&[]);
    let mut pooled = server.client();
    let first = claim(&mut pooled, "t", "k", "h");
    complete(&mut pooled, "t", "k", fence(&first), 200, "{}");
    server
        .client()
        .batch_execute("DROP EXTENSION pg_idem; CREATE EXTENSION pg_idem;")
        .unwrap();
    let again = claim(&mut pooled, "t", "k", "h");
    assert_eq!(
        (again.outcome.as_str(), again.attempt),
        ("claimed", Some(1)),
        "the keys went with the extension"
    );
    complete(&mut pooled, "t", "k", fence(&again), 200, "{}");
    assert_eq!(claim(&mut pooled, "t", "k", "h").outcome, "completed");
}

#[test]
fn a_claim_that_lost_a_race_leaves_no_trace_for_other_sessions() {
    // Several sessions claim the same fresh key at once and keep their transactions open; the
    // one that inserted it rolls back. A session whose insert lost the race (its row taken
    // back) must not look like it holds the key: the next claim of the key is `claimed`, not
    // `in_progress` until every loser's transaction ends (their rows are killed at once, as
    // INSERT ... ON CONFLICT kills a speculative insertion that lost).
    let server = Server::start(&[]);
    let racers = 6;
    let rounds = 150;
    let mut clients: Vec<Client> = (0..racers).map(|_| server.client()).collect();
    let mut fresh = server.client();
    let mut outcomes = std::collections::BTreeMap::new();
    for round in 0..rounds {
        let key = format!("race-{round}");
        let barrier = Arc::new(Barrier::new(racers));
        // every racer claims in its own open transaction; the claims are sent at once
        let answers: Vec<(usize, String)> = thread::scope(|scope| {
            let handles: Vec<_> = clients
                .iter_mut()
                .enumerate()
                .map(|(i, db)| {
                    let barrier = barrier.clone();
                    let key = key.clone();
                    scope.spawn(move || {
                        db.batch_execute("BEGIN").unwrap();
                        barrier.wait();
                        (i, claim(db, "race", &key, "h").outcome)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<usize> = answers
            .iter()
            .filter(|(_, o)| o == "claimed")
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {answers:?}");
        // the winner rolls back; the losers' transactions stay open
        clients[winners[0]].batch_execute("ROLLBACK").unwrap();
        let next = claim(&mut fresh, "race", &key, "h").outcome;
        *outcomes.entry(next.clone()).or_insert(0) += 1;
        assert_eq!(
            next, "claimed",
            "round {round}: the key is held by nobody, but a claim answered {next}"
        );
        for (i, db) in clients.iter_mut().enumerate() {
            if i != winners[0] {
                db.batch_execute("ROLLBACK").unwrap();
            }
        }
    }
    println!("{rounds} rounds: {outcomes:?}");
    amcheck(&mut server.client());
}
