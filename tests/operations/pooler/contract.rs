//! What an application sees through the pooler: the core calls in transaction mode and in
//! session mode, and why the calls here take no named statements.

use super::*;

// ---------------------------------------------------------------------------------------------
// The core behaviour
// ---------------------------------------------------------------------------------------------

fn core(path: Path) {
    let rig = Rig::start(path, "", &[]);
    let mut a = rig.pooled();
    let mut b = rig.pooled();
    let mut direct = rig.server.client();
    let t = "core";

    // claim, business write and complete in one transaction; then the replay, from another
    // client and so another backend's transaction
    let mut tx = a.transaction().unwrap();
    let c = claim(&mut tx, t, "k1", "h1");
    assert_eq!((c.outcome.as_str(), c.attempt), ("claimed", Some(1)));
    effect(&mut tx, t, "k1", "paid");
    complete(&mut tx, t, "k1", fence(&c), 201, r#"{"payment": 7}"#);
    tx.commit().unwrap();
    for db in [&mut a, &mut b] {
        let r = claim(db, t, "k1", "h1");
        assert_eq!(r.outcome, "completed");
        assert_eq!(r.code, Some(201));
        assert_eq!(r.body.as_deref(), Some(r#"{"payment": 7}"#));
        assert_eq!(r.fence, None);
    }
    // mismatch: the same key, another request
    let m = claim(&mut b, t, "k1", "other");
    assert_eq!((m.outcome.as_str(), m.body), ("mismatch", None));
    assert_eq!(effects(&mut direct, t, "k1"), ["paid"]);

    // in_progress answered without waiting while a transaction on the other backend holds
    // the claim; a rollback leaves nothing, so the next claim is a fresh one
    let holder = hold(&mut a);
    let c = claim(&mut a, t, "k2", "h");
    assert_eq!(c.outcome, "claimed");
    effect(&mut a, t, "k2", "rolled back");
    let started = Instant::now();
    let other = claim(&mut b, t, "k2", "h");
    assert_eq!(other.outcome, "in_progress");
    assert_ne!(
        other.pid, holder,
        "two transactions at once are on two backends"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "in_progress took {:?}",
        started.elapsed()
    );
    a.batch_execute("ROLLBACK").unwrap();
    let again = claim(&mut b, t, "k2", "h");
    assert_eq!(
        (again.outcome.as_str(), again.attempt),
        ("claimed", Some(1))
    );
    assert!(effects(&mut direct, t, "k2").is_empty());

    // fail: replayed as failed
    let c = claim(&mut a, t, "k3", "h");
    b.query_typed(
        "SELECT idem_fail_final($1, $2, $3, $4, $5::jsonb)",
        &[
            (&t, Type::TEXT),
            (&"k3", Type::TEXT),
            (&fence(&c), Type::INT8),
            (&502, Type::INT4),
            (&r#"{"error": "upstream"}"#, Type::TEXT),
        ],
    )
    .unwrap();
    let r = claim(&mut a, t, "k3", "h");
    assert_eq!(
        (r.outcome.as_str(), r.code, r.body.as_deref()),
        ("failed", Some(502), Some(r#"{"error": "upstream"}"#))
    );

    // release: a committed claim given back; the retry claims it afresh
    let c = claim(&mut a, t, "k4", "h");
    b.query_typed(
        "SELECT idem_release($1, $2, $3)",
        &[
            (&t, Type::TEXT),
            (&"k4", Type::TEXT),
            (&fence(&c), Type::INT8),
        ],
    )
    .unwrap();
    assert_eq!(claim(&mut b, t, "k4", "h").outcome, "claimed");

    // a lease takeover, then the stale fence refused with the business write of its transaction
    let old = claim_lease(&mut a, t, "k5", "200 ms");
    std::thread::sleep(Duration::from_millis(300));
    let new = claim_lease(&mut b, t, "k5", "1 min");
    assert_eq!((new.outcome.as_str(), new.attempt), ("claimed", Some(2)));
    assert!(fence(&new) > fence(&old));
    let mut tx = a.transaction().unwrap();
    effect(&mut tx, t, "k5", "stale worker");
    let err = try_complete(&mut tx, t, "k5", fence(&old), 200, "{}").unwrap_err();
    assert_eq!(state_of(&err), "55000");
    drop(tx); // ROLLBACK
    let mut tx = b.transaction().unwrap();
    effect(&mut tx, t, "k5", "new worker");
    complete(&mut tx, t, "k5", fence(&new), 200, r#"{"by": "new"}"#);
    tx.commit().unwrap();
    assert_eq!(effects(&mut direct, t, "k5"), ["new worker"]);
    assert_eq!(
        claim(&mut a, t, "k5", "h").body.as_deref(),
        Some(r#"{"by": "new"}"#)
    );

    // idem_consume and idem_consume_many
    let consume = |db: &mut Client, key: &str| -> bool {
        db.query_typed(
            "SELECT idem_consume($1, $2)",
            &[(&t, Type::TEXT), (&key, Type::TEXT)],
        )
        .unwrap()[0]
            .get(0)
    };
    assert!(consume(&mut a, "m1"));
    assert!(!consume(&mut b, "m1"));
    assert!(!consume(&mut a, "m1"));
    let keys = vec!["m1", "m2", "m3", "m2"];
    let fresh: Vec<String> = b
        .query_typed(
            "SELECT k FROM idem_consume_many($1, $2) AS k",
            &[(&t, Type::TEXT), (&keys, Type::TEXT_ARRAY)],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(fresh, ["m2", "m3"]);
    let fresh_again = a
        .query_typed(
            "SELECT k FROM idem_consume_many($1, $2) AS k",
            &[(&t, Type::TEXT), (&keys, Type::TEXT_ARRAY)],
        )
        .unwrap();
    assert!(fresh_again.is_empty());

    // a batch: idem_claim_many and idem_complete_many in one transaction, replayed after
    let keys = vec!["b1", "b2", "b1"];
    let hashes = vec!["h", "h", "h"];
    let claim_many = |db: &mut dyn FnMut(&str, &Params<'_>) -> Vec<postgres::Row>| {
        db(
            "SELECT m.key, m.outcome, m.fence, m.response_code FROM idem_claim_many($1, $2, $3) AS m",
            &[
                (&t, Type::TEXT),
                (&keys, Type::TEXT_ARRAY),
                (&hashes, Type::TEXT_ARRAY),
            ],
        )
        .iter()
        .map(|r| {
            (
                r.get::<_, String>(0),
                r.get::<_, String>(1),
                r.get::<_, Option<i64>>(2),
                r.get::<_, Option<i32>>(3),
            )
        })
        .collect::<Vec<_>>()
    };
    let mut tx = a.transaction().unwrap();
    let rows = claim_many(&mut |sql, p| tx.query_typed(sql, p).unwrap());
    let outcomes: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(outcomes, ["claimed", "claimed", "in_progress"]);
    let done_keys = vec!["b1", "b2"];
    let fences: Vec<i64> = rows[..2].iter().map(|r| r.2.unwrap()).collect();
    let codes = vec![200, 201];
    effect(&mut tx, t, "b1", "batch");
    effect(&mut tx, t, "b2", "batch");
    let completed = tx
        .query_typed(
            "SELECT count(*) FROM idem_complete_many($1, $2, $3, $4)",
            &[
                (&t, Type::TEXT),
                (&done_keys, Type::TEXT_ARRAY),
                (&fences, Type::INT8_ARRAY),
                (&codes, Type::INT4_ARRAY),
            ],
        )
        .unwrap()[0]
        .get::<_, i64>(0);
    assert_eq!(completed, 2);
    tx.commit().unwrap();
    let rows = claim_many(&mut |sql, p| b.query_typed(sql, p).unwrap());
    let answers: Vec<(&str, Option<i32>)> = rows.iter().map(|r| (r.1.as_str(), r.3)).collect();
    assert_eq!(
        answers,
        [
            ("completed", Some(200)),
            ("completed", Some(201)),
            ("completed", Some(200))
        ]
    );
    assert_eq!(effects(&mut direct, t, "b1"), ["batch"]);
    rig.assert_path();
}

// ---------------------------------------------------------------------------------------------
// Why query_typed: named statements through a transaction pooler
// ---------------------------------------------------------------------------------------------

#[test]
fn named_statements_need_a_transaction() {
    let rig = Rig::start(Path::Engine, "", &[]);
    let mut db = rig.pooled();
    let mut other = rig.pooled();
    // inside one transaction the client stays on one backend: `query` (a named statement,
    // prepared and executed in two round trips) works
    let mut tx = db.transaction().unwrap();
    let row = tx
        .query_one(
            "SELECT outcome FROM idem_claim($1, $2, $3)",
            &[&"named", &"k1", &"h"],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "claimed");
    tx.commit().unwrap();
    // outside one, the statement is prepared on one backend and may be executed on another,
    // where it does not exist: forced here by occupying the backend it was prepared on
    let statement = db
        .prepare("SELECT outcome FROM idem_claim($1, $2, $3)")
        .unwrap();
    let prepared_on = simple_one(&mut db, "SELECT pg_backend_pid()")
        .unwrap()
        .unwrap()
        .parse::<i32>()
        .unwrap();
    occupy(&mut other, prepared_on);
    let err = db.query(&statement, &[&"named", &"k2", &"h"]).unwrap_err();
    assert_eq!(state_of(&err), "26000", "prepared statement does not exist");
    end(&mut other);
    // query_typed sends it whole, unnamed: it works anywhere
    assert_eq!(
        try_claim(&mut db, "named", "k2", "h", None)
            .unwrap()
            .outcome,
        "claimed"
    );
}

// ---------------------------------------------------------------------------------------------
// Session mode: a backend per client session, DISCARD ALL between clients
// ---------------------------------------------------------------------------------------------

fn session_mode(path: Path) {
    let rig = Rig::start(path, "", &[]);
    let t = "session";
    // the first client: a session setting, named statements outside transactions (they work in
    // session mode), a committed claim in lease mode
    let mut first = rig.bouncer.connect("session", dba_role());
    first
        .batch_execute("SET pg_idem.lease_timeout = '7 min'")
        .unwrap();
    let first_pid = pid(&mut first);
    let row = first
        .query_one(
            "SELECT c.fence, c.lease_expires_at - now() > interval '6 min' \
               FROM idem_claim($1, $2, $3) AS c",
            &[&t, &"k1", &"h"],
        )
        .unwrap();
    let f: i64 = row.get(0);
    assert!(row.get::<_, bool>(1), "the session's lease_timeout counted");
    for key in ["k2", "k3"] {
        let c = first
            .query_one(
                "SELECT c.outcome FROM idem_claim($1, $2, $3) AS c",
                &[&t, &key, &"h"],
            )
            .unwrap();
        assert_eq!(c.get::<_, String>(0), "claimed");
    }
    drop(first);
    // the next client gets the same backend, after DISCARD ALL: the setting is gone, pg_idem's
    // own plans (SPI path) are planned again and answer as before
    let mut next = rig.bouncer.connect("session", dba_role());
    wait_for("the same backend", Duration::from_secs(10), || {
        pid(&mut next) == first_pid
    });
    // (in the SQL edition the setting is a placeholder, which DISCARD ALL empties: the default)
    let default = match edition() {
        Edition::Native => "1min",
        Edition::Sql => "",
    };
    assert_eq!(
        simple_one(&mut next, "SHOW pg_idem.lease_timeout")
            .unwrap()
            .as_deref(),
        Some(default)
    );
    assert_eq!(claim(&mut next, t, "k1", "h").outcome, "in_progress");
    let mut tx = next.transaction().unwrap();
    effect(&mut tx, t, "k1", "session");
    complete(&mut tx, t, "k1", f, 201, r#"{"mode": "session"}"#);
    tx.commit().unwrap();
    let r = claim(&mut next, t, "k1", "h");
    assert_eq!(
        (r.outcome.as_str(), r.body.as_deref()),
        ("completed", Some(r#"{"mode": "session"}"#))
    );
    let fresh = claim(&mut next, t, "k4", "h");
    assert_eq!(fresh.outcome, "claimed");
    assert!(fence(&fresh) > f);
    assert_eq!(effects(&mut rig.server.client(), t, "k1"), ["session"]);
    rig.assert_path();
}

on_both_paths!(core, core_on_the_engine_path, core_on_the_spi_path);

on_both_paths!(
    session_mode,
    session_mode_on_the_engine_path,
    session_mode_on_the_spi_path
);
