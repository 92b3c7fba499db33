//! Clients and backends apart: many clients on two server connections, a client that vanishes
//! inside a transaction, lease mode across backends.

use super::*;

// ---------------------------------------------------------------------------------------------
// Many clients, two server connections
// ---------------------------------------------------------------------------------------------

const CLIENTS: usize = 16;
const CROWD_KEYS: usize = 24;

fn crowd(path: Path) {
    let rig = Rig::start(path, "", &[]);
    let t = "crowd";
    let start = Arc::new(Barrier::new(CLIENTS));
    // (key, outcome, body) of every final answer, and every backend seen
    let answers = Arc::new(Mutex::new(Vec::<(String, String, Option<String>)>::new()));
    let pids = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let in_progress = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for client in 0..CLIENTS {
            let (start, answers, pids, in_progress) = (
                start.clone(),
                answers.clone(),
                pids.clone(),
                in_progress.clone(),
            );
            let mut db = rig.pooled();
            s.spawn(move || {
                start.wait();
                for i in 0..CROWD_KEYS {
                    // every client asks for every key in the same order, so that the two
                    // transactions running at any moment often claim the same one
                    let key = format!("key-{}", (i + client % 2) % CROWD_KEYS);
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        let mut tx = db.transaction().expect("BEGIN");
                        let c = claim(&mut tx, t, &key, "h");
                        pids.lock().unwrap().insert(c.pid);
                        match c.outcome.as_str() {
                            "claimed" => {
                                effect(&mut tx, t, &key, &format!("client {client}"));
                                // hold the backend a little: the others meet the claim
                                std::thread::sleep(Duration::from_millis(5));
                                let body = format!(r#"{{"by": {client}, "key": "{key}"}}"#);
                                complete(&mut tx, t, &key, fence(&c), 201, &body);
                                tx.commit().expect("COMMIT");
                            }
                            "completed" => tx.commit().expect("COMMIT"),
                            "in_progress" => {
                                in_progress.fetch_add(1, Ordering::Relaxed);
                                drop(tx);
                                assert!(Instant::now() < deadline, "{key} stayed in progress");
                                std::thread::sleep(Duration::from_millis(3));
                                continue;
                            }
                            other => panic!("{key}: unexpected {other}: {c:?}"),
                        }
                        answers.lock().unwrap().push((key, c.outcome, c.body));
                        break;
                    }
                }
            });
        }
    });
    let mut direct = rig.server.client();
    let answers = answers.lock().unwrap();
    assert_eq!(answers.len(), CLIENTS * CROWD_KEYS);
    for k in 0..CROWD_KEYS {
        let key = format!("key-{k}");
        let done = effects(&mut direct, t, &key);
        assert_eq!(done.len(), 1, "{key}: effects {done:?}");
        let stored: String = direct
            .query_typed(
                "SELECT response_body::text FROM idem_claim($1, $2, 'h')",
                &[(&t, Type::TEXT), (&key.as_str(), Type::TEXT)],
            )
            .unwrap()[0]
            .get(0);
        assert!(stored.contains(&format!("\"by\": {}", &done[0]["client ".len()..])));
        let mine: Vec<_> = answers.iter().filter(|a| a.0 == key).collect();
        assert_eq!(mine.len(), CLIENTS);
        assert_eq!(mine.iter().filter(|a| a.1 == "claimed").count(), 1);
        for replay in mine.iter().filter(|a| a.1 == "completed") {
            assert_eq!(replay.2.as_deref(), Some(stored.as_str()), "{key}");
        }
    }
    let pids = pids.lock().unwrap();
    assert_eq!(pids.len(), 2, "16 clients shared 2 backends: {pids:?}");
    assert!(
        in_progress.load(Ordering::Relaxed) > 0,
        "no claim met another in flight: the case proved nothing about duplicates"
    );
    println!(
        "{path:?}: {} requests over backends {pids:?}, {} in_progress answers",
        answers.len(),
        in_progress.load(Ordering::Relaxed)
    );
    rig.assert_path();
}

// ---------------------------------------------------------------------------------------------
// A client that vanishes inside a transaction
// ---------------------------------------------------------------------------------------------

fn vanished_client(path: Path) {
    let rig = Rig::start(path, "", &[]);
    let mut direct = rig.server.client();
    let t = "vanish";
    // psql as the client, killed with SIGKILL while its transaction holds a claim and an
    // uncommitted business row: the kernel closes its socket, it sends nothing more
    let mut psql = Command::new(bindir().join("psql"))
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
        .arg(rig.bouncer.conninfo("single", dba_role()))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start psql");
    psql.stdin
        .as_mut()
        .unwrap()
        .write_all(
            b"BEGIN;\n\
              SELECT outcome FROM idem_claim('vanish', 'gone', 'h');\n\
              INSERT INTO public.effects VALUES ('vanish', 'gone', 'dead client');\n\
              SELECT 'vanishing-client-marker';\n",
        )
        .unwrap();
    psql.stdin.as_mut().unwrap().flush().unwrap();
    let mut dead = 0;
    wait_for(
        "the client's transaction to hold its claim",
        Duration::from_secs(20),
        || {
            let rows = direct
                .query_typed(
                    "SELECT pid FROM pg_stat_activity WHERE state = 'idle in transaction' \
                      AND query LIKE '%vanishing-client-marker%' AND pid <> pg_backend_pid()",
                    &[],
                )
                .unwrap();
            if let Some(r) = rows.first() {
                dead = r.get(0);
            }
            dead != 0
        },
    );
    // meanwhile the key is in progress (seen directly, not through the busy single pool)
    assert_eq!(claim(&mut direct, t, "gone", "h").outcome, "in_progress");
    // a client of the same one-connection pool waits for a server connection; it must get a
    // fresh one, not the dead client's open transaction
    let waiter = {
        let conninfo = rig.bouncer.conninfo("single", dba_role());
        std::thread::spawn(move || {
            let mut db = Client::connect(&conninfo, NoTls).expect("connect");
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut in_progress = 0;
            loop {
                let mut tx = db.transaction().expect("BEGIN");
                let c = claim(&mut tx, "vanish", "gone", "h");
                if c.outcome == "in_progress" && Instant::now() < deadline {
                    // the dead backend may take a moment to notice and roll back
                    in_progress += 1;
                    drop(tx);
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                // inside the dead transaction this would see its uncommitted row
                let seen = effects(&mut tx, "vanish", "gone");
                if c.outcome == "claimed" {
                    effect(&mut tx, "vanish", "gone", "next client");
                    complete(&mut tx, "vanish", "gone", fence(&c), 200, "{}");
                }
                tx.commit().expect("COMMIT");
                return (c, seen, in_progress);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "the one server connection is busy");
    let killed = Instant::now();
    psql.kill().expect("kill psql");
    let _ = psql.wait();
    let (c, seen, in_progress) = waiter.join().expect("the next client");
    let after_kill = killed.elapsed();
    println!("{path:?}: the next client got the key {after_kill:?} after the kill ({in_progress} in_progress answers first)");
    assert_eq!(c.outcome, "claimed", "the dead client's claim is gone");
    assert_ne!(c.pid, dead, "the next client got another backend");
    assert!(seen.is_empty(), "the next client saw {seen:?}");
    assert!(
        after_kill < Duration::from_secs(10),
        "the next client waited {after_kill:?} after the kill"
    );
    wait_for(
        "pgbouncer to close the dead client's server connection",
        Duration::from_secs(10),
        || {
            count(
                &mut direct,
                &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {dead}"),
            ) == 0
        },
    );
    assert_eq!(effects(&mut direct, t, "gone"), ["next client"]);
    rig.assert_path();
}

// ---------------------------------------------------------------------------------------------
// Lease mode across backends
// ---------------------------------------------------------------------------------------------

fn lease_mode(path: Path) {
    let rig = Rig::start(path, "", &[]);
    let mut worker = rig.pooled();
    let mut other = rig.pooled();
    let mut direct = rig.server.client();
    let t = "lease";

    // claim with a lease and commit (autocommit: its own transaction)
    let c = claim_lease(&mut worker, t, "order-1", "30 s");
    assert_eq!(c.outcome, "claimed");
    // the work happens outside the database; then the completion, on another backend
    occupy(&mut other, c.pid);
    let mut tx = worker.transaction().unwrap();
    let done_on = pid(&mut tx);
    assert_ne!(done_on, c.pid, "the completion runs on another backend");
    tx.query_typed(
        "SELECT idem_assert_fence($1, $2, $3)",
        &[
            (&t, Type::TEXT),
            (&"order-1", Type::TEXT),
            (&fence(&c), Type::INT8),
        ],
    )
    .unwrap();
    effect(&mut tx, t, "order-1", "shipped");
    complete(
        &mut tx,
        t,
        "order-1",
        fence(&c),
        200,
        r#"{"shipped": true}"#,
    );
    tx.commit().unwrap();
    end(&mut other);
    let r = claim(&mut other, t, "order-1", "h");
    assert_eq!(
        (r.outcome.as_str(), r.body.as_deref()),
        ("completed", Some(r#"{"shipped": true}"#))
    );

    // a stale worker: its lease passes, another client takes the key over, and its completion,
    // on a backend other than its claim's, is refused with its business write
    let stale = claim_lease(&mut worker, t, "order-2", "200 ms");
    std::thread::sleep(Duration::from_millis(300));
    let taker = claim_lease(&mut other, t, "order-2", "1 min");
    assert_eq!(
        (taker.outcome.as_str(), taker.attempt),
        ("claimed", Some(2))
    );
    occupy(&mut other, stale.pid);
    let mut tx = worker.transaction().unwrap();
    assert_ne!(pid(&mut tx), stale.pid);
    effect(&mut tx, t, "order-2", "stale");
    let err = try_complete(&mut tx, t, "order-2", fence(&stale), 200, "{}").unwrap_err();
    assert_eq!(state_of(&err), "55000");
    drop(tx);
    end(&mut other);
    let mut tx = other.transaction().unwrap();
    effect(&mut tx, t, "order-2", "taker");
    complete(
        &mut tx,
        t,
        "order-2",
        fence(&taker),
        200,
        r#"{"by": "taker"}"#,
    );
    tx.commit().unwrap();
    assert_eq!(effects(&mut direct, t, "order-2"), ["taker"]);
    assert_eq!(
        claim(&mut worker, t, "order-2", "h").body.as_deref(),
        Some(r#"{"by": "taker"}"#)
    );
    rig.assert_path();
}

on_both_paths!(crowd, crowd_on_the_engine_path, crowd_on_the_spi_path);
on_both_paths!(
    vanished_client,
    a_vanished_client_on_the_engine_path,
    a_vanished_client_on_the_spi_path
);
on_both_paths!(
    lease_mode,
    lease_mode_on_the_engine_path,
    lease_mode_on_the_spi_path
);
