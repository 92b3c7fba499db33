//! Locks another tenant's role can take: advisory locks hold no key, and an open transaction
//! holds no other tenant's keys.

use super::*;

/// The id a key's lock would have if key_lock_id were public: the first 8 bytes of
/// SHA-256(tenant, 0, key), as natively (src/hashing/mod.rs), which any role can compute.
fn public_lock_id(tenant: &str, key: &str) -> String {
    format!(
        "('x' || encode(substr(sha256(convert_to('{tenant}', 'UTF8') || '\\x00'::bytea \
         || convert_to('{key}', 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint"
    )
}

/// The id the SQL edition locks a key with, as a role sees it in pg_locks while a transaction
/// holds it (read here from idem.key_lock_id as a superuser, for a key nobody holds yet).
fn seen_lock_id(server: &Server, tenant: &str, key: &str) -> String {
    one(
        &mut server.client(),
        &format!("SELECT idem.key_lock_id('{tenant}', '{key}')"),
    )
}

/// `id` in pg_advisory_lock(bigint)'s space, taken by `db` at session level and held until it
/// disconnects.
fn take_lock(db: &mut Client, id: &str) {
    one(db, &format!("SELECT pg_advisory_lock({id})"));
}

/// A server with roles bank_app (granted tenant bank, tenant grants on) and mallory (no grant),
/// and bank's connection, whose claim of `key` (fence in my.old) has a lease that has passed.
fn bank_with_an_expired_claim(key: &str) -> (Server, Client) {
    let server = plain_server(&[]);
    server
        .client()
        .batch_execute("CREATE ROLE bank_app LOGIN; CREATE ROLE mallory LOGIN")
        .unwrap();
    grant(&server, "bank_app", "bank");
    tenant_grants_on(&server);
    let mut bank = connect_with(&server, "bank_app", "postgres", "5s");
    assert_eq!(
        claim_into(
            &mut bank,
            "old",
            &format!("idem_claim('bank', '{key}', 'h', '1 millisecond')")
        ),
        "claimed"
    );
    std::thread::sleep(Duration::from_millis(20));
    (server, bank)
}

/// The SQL edition's key locks are in the advisory lock space of pg_advisory_lock(bigint),
/// which every role may call; natively pg_idem's key locks live in a space no SQL function can
/// produce (src/pg/locks.rs). So the SQL edition's lock ids are keyed with a secret only
/// pg_idem's owner reads (idem.key_lock_id), and the lock is a hint, the key's row the truth
/// (idem.key_held_elsewhere). A role with no grant that takes the ids it can compute (0.5.0's
/// were public) holds nothing of another tenant's, and one that takes an id it sees in pg_locks
/// makes nobody wait for it.
#[test]
fn another_roles_advisory_lock_holds_no_key() {
    // order-1: an attempt whose lease has passed
    let (server, mut bank) = bank_with_an_expired_claim("order-1");
    let mut mallory = connect(&server, "mallory", "postgres");
    for key in ["order-1", "message-1", "message-2", "order-9", "order-new"] {
        take_lock(&mut mallory, &public_lock_id("bank", key));
    }
    let started = Instant::now();
    assert_eq!(
        claim_into(&mut bank, "f1", "idem_claim('bank', 'order-1', 'h')"),
        "claimed",
        "bank takes its key over"
    );
    assert_eq!(
        ask(&mut bank, "SELECT idem_consume('bank', 'message-1')").first(),
        "t",
        "bank's first consume of a new message"
    );
    assert_eq!(
        ask(
            &mut bank,
            "SELECT pg_catalog.array_to_string(pg_catalog.array_agg(m), ',') \
             FROM idem_consume_many('bank', ARRAY['message-2', 'message-3']) AS m"
        )
        .first(),
        "message-2,message-3",
        "bank's consume of a batch of new messages"
    );
    assert_eq!(
        ask(
            &mut bank,
            &format!(
                "SELECT idem_heartbeat('bank', 'order-1', {}) IS NOT NULL",
                fence("f1")
            )
        )
        .first(),
        "t"
    );
    assert_eq!(
        ask(
            &mut bank,
            &format!(
                "SELECT idem_complete('bank', 'order-1', {}, 200) IS NOT NULL",
                fence("f1")
            )
        )
        .first(),
        "t"
    );
    assert_eq!(
        ask(&mut bank, "SELECT idem_forget('bank', 'order-1')").first(),
        "t",
        "bank forgets its key"
    );
    assert_eq!(
        ask(&mut bank, "SELECT idem_forget('bank', 'order-9')").first(),
        "f",
        "a key without a row: nothing forgotten"
    );
    assert_eq!(
        one(
            &mut server.client(),
            "SELECT count(*) FROM idem.keys WHERE tenant = 'bank' AND key IN ('order-1', 'order-9')"
        ),
        "0",
        "and no row left behind"
    );
    assert_eq!(
        one(
            &mut bank,
            "SELECT c.outcome FROM idem_claim('bank', 'order-new', 'h') AS c"
        ),
        "claimed",
        "bank's first claim of a new key"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "none of bank's calls waited for mallory's locks: {:?}",
        started.elapsed()
    );
    // nor by taking a lock it sees in pg_locks (every role reads pg_locks): the key lock that
    // bank's open claim holds, taken by mallory as soon as bank's transaction ends and held
    // while bank finishes the key
    let mut holder = connect(&server, "bank_app", "postgres");
    let holder_pid = one(&mut holder, "SELECT pg_catalog.pg_backend_pid()");
    holder.batch_execute("BEGIN").unwrap();
    assert_eq!(
        claim_into(&mut holder, "f", "idem_claim('bank', 'order-2', 'h')"),
        "claimed"
    );
    let fence_of_order_2 = one(&mut holder, "SELECT pg_catalog.current_setting('my.f')");
    let port = server.port;
    let snooper = std::thread::spawn(move || {
        let mut mallory = connect_to_port(port, "mallory", "postgres", "20s");
        // whatever pg_idem locks with pg_advisory_xact_lock(bigint) shows as objsubid 1
        let taken = one(
            &mut mallory,
            &format!(
                "SELECT pg_catalog.count(pg_advisory_lock((l.classid::bigint << 32) | l.objid::bigint)) \
                 FROM pg_locks AS l WHERE l.locktype = 'advisory' AND l.objsubid = 1 \
                   AND l.granted AND l.pid = {holder_pid}"
            ),
        );
        // holds what it took until the test ends
        std::thread::sleep(Duration::from_secs(8));
        drop(mallory);
        taken
    });
    std::thread::sleep(Duration::from_millis(500));
    holder.batch_execute("COMMIT").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let completed = ask(
        &mut bank,
        &format!("SELECT idem_complete('bank', 'order-2', {fence_of_order_2}, 200) IS NOT NULL"),
    );
    assert_eq!(completed.first(), "t", "bank completes its own claim");
    assert_eq!(
        snooper.join().unwrap(),
        "1",
        "mallory held order-2's lock meanwhile"
    );
    assert_no_crash(&server);
}

/// Where another role holds a key's real lock id (seen in pg_locks), a transaction that takes
/// the key over holds it all the same, by its row: a second claim answers in_progress and the
/// stale attempt's complete waits for it, then loses its lease. A forget waits for a claim
/// inserting the key (whose lock it finds held), then deletes what it committed. Red when
/// idem.key_held_elsewhere answers "free" for a locked row, or when the forget does not wait.
/// And the limit docs/editions.md names: the claims of a key without a row answer in_progress
/// while another role holds its lock.
#[test]
fn a_claim_holds_its_key_by_its_row_when_another_role_holds_the_lock() {
    // order-4: a claim whose lease has passed, for a takeover
    let (server, mut bank) = bank_with_an_expired_claim("order-4");
    let mut mallory = connect(&server, "mallory", "postgres");
    for key in ["order-4", "order-new"] {
        take_lock(&mut mallory, &seen_lock_id(&server, "bank", key));
    }
    let mut holder = connect_with(&server, "bank_app", "postgres", "10s");
    holder.batch_execute("BEGIN").unwrap();
    assert_eq!(
        claim_into(&mut holder, "f4", "idem_claim('bank', 'order-4', 'h')"),
        "claimed",
        "a takeover"
    );
    let started = Instant::now();
    assert_eq!(
        one(
            &mut bank,
            "SELECT c.outcome FROM idem_claim('bank', 'order-4', 'h') AS c"
        ),
        "in_progress",
        "while the holder's transaction is open"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let port = server.port;
    let stale_fence = one(&mut bank, &format!("SELECT {}", fence("old")));
    let stale = std::thread::spawn(move || {
        let mut bank = connect_to_port(port, "bank_app", "postgres", "60s");
        let started = Instant::now();
        let answer = ask(
            &mut bank,
            &format!("SELECT idem_complete('bank', 'order-4', {stale_fence}, 200) IS NOT NULL"),
        );
        (answer.code().map(str::to_string), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        ask(
            &mut holder,
            &format!(
                "SELECT idem_complete('bank', 'order-4', {}, 201) IS NOT NULL",
                fence("f4")
            )
        )
        .first(),
        "t"
    );
    holder.batch_execute("COMMIT").unwrap();
    let (code, waited) = stale.join().unwrap();
    assert_eq!(
        code.as_deref(),
        Some("55000"),
        "the attempt taken over lost its lease"
    );
    assert!(
        waited >= Duration::from_millis(500),
        "the stale complete waited: {waited:?}"
    );
    assert_eq!(
        one(&mut bank, "SELECT c.outcome || ' ' || c.response_code FROM idem_claim('bank', 'order-4', 'h') AS c"),
        "completed 201"
    );
    // a forget finds the lock of a key being inserted held, and waits for the insert
    holder.batch_execute("BEGIN").unwrap();
    assert_eq!(
        claim_into(&mut holder, "f5", "idem_claim('bank', 'order-5', 'h')"),
        "claimed"
    );
    let forget = std::thread::spawn(move || {
        let mut bank = connect_to_port(port, "bank_app", "postgres", "60s");
        let started = Instant::now();
        let forgotten = one(&mut bank, "SELECT idem_forget('bank', 'order-5')::text");
        (forgotten, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(700));
    holder.batch_execute("COMMIT").unwrap();
    let (forgotten, waited) = forget.join().unwrap();
    assert_eq!(
        forgotten, "true",
        "the forget deleted the claim it waited for"
    );
    assert!(
        waited >= Duration::from_millis(500),
        "the forget waited: {waited:?}"
    );
    // the limit
    assert_eq!(
        one(
            &mut bank,
            "SELECT c.outcome FROM idem_claim('bank', 'order-new', 'h') AS c"
        ),
        "in_progress"
    );
    drop(mallory);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        one(
            &mut bank,
            "SELECT c.outcome FROM idem_claim('bank', 'order-new', 'h') AS c"
        ),
        "claimed"
    );
    amcheck(&mut server.client());
    assert_no_crash(&server);
}

/// A deleted lock secret (idem.key_lock_secret's one row) refuses every call that locks a key,
/// with 55000, rather than locking with a NULL id, which no lock would hold: every claim would go
/// on as if it held the key. Red when idem.key_lock_secret_of_session returns NULL.
#[test]
fn a_deleted_lock_secret_refuses_the_calls_that_lock() {
    let server = plain_server(&[]);
    connect(&server, ADMIN, "postgres")
        .batch_execute("DELETE FROM idem.key_lock_secret")
        .unwrap();
    let mut db = connect(&server, ADMIN, "postgres");
    for call in [
        "SELECT idem_claim('t', 'k', 'h')",
        "SELECT idem_consume('t', 'm')",
        "SELECT idem_forget('t', 'k')",
    ] {
        let answer = ask(&mut db, call);
        assert_eq!(answer.code(), Some("55000"), "{call}");
        assert_eq!(
            answer.first(),
            "ERROR 55000: pg_idem: idem.key_lock_secret holds no secret",
            "{call}"
        );
    }
    assert_no_crash(&server);
}

/// The workaround of the limit above (docs/editions.md), where a superuser can apply
/// it: EXECUTE on the functions of pg_advisory_lock(bigint)'s space revoked from PUBLIC and
/// granted back to pg_idem's owner, whom the SQL edition's functions run as. No other role
/// can take or wait for a key's lock then, and pg_idem's calls work as before.
#[test]
fn revoking_the_advisory_lock_functions_keeps_other_roles_off_the_key_locks() {
    let server = plain_server(&[]);
    server
        .client()
        .batch_execute(&format!(
            "CREATE ROLE bank_app LOGIN; CREATE ROLE mallory LOGIN; {}",
            ADVISORY_LOCK_WORKAROUND.replace("app_owner", ADMIN)
        ))
        .unwrap();
    grant(&server, "bank_app", "bank");
    tenant_grants_on(&server);
    let mut mallory = connect(&server, "mallory", "postgres");
    for function in [
        "pg_advisory_lock",
        "pg_advisory_lock_shared",
        "pg_try_advisory_lock",
        "pg_try_advisory_lock_shared",
        "pg_advisory_xact_lock",
        "pg_advisory_xact_lock_shared",
        "pg_try_advisory_xact_lock",
        "pg_try_advisory_xact_lock_shared",
    ] {
        assert_eq!(
            ask(
                &mut mallory,
                &format!("SELECT pg_catalog.{function}(1::bigint)")
            )
            .code(),
            Some("42501"),
            "{function}(bigint)"
        );
    }
    let mut bank = connect(&server, "bank_app", "postgres");
    assert_eq!(
        claim_into(&mut bank, "f", "idem_claim('bank', 'order-1', 'h')"),
        "claimed"
    );
    assert_eq!(
        ask(
            &mut bank,
            &format!(
                "SELECT idem_complete('bank', 'order-1', {}, 200) IS NOT NULL",
                fence("f")
            )
        )
        .first(),
        "t"
    );
    assert_eq!(
        ask(&mut bank, "SELECT idem_consume('bank', 'message-1')").first(),
        "t"
    );
    assert_eq!(
        ask(&mut bank, "SELECT idem_forget('bank', 'order-1')").first(),
        "t"
    );
    assert_no_crash(&server);
}

/// The README's workaround, as a superuser runs it (`app_owner`: pg_idem's owner).
const ADVISORY_LOCK_WORKAROUND: &str = "\
    REVOKE EXECUTE ON FUNCTION pg_catalog.pg_advisory_lock(bigint), pg_catalog.pg_advisory_lock_shared(bigint), \
        pg_catalog.pg_try_advisory_lock(bigint), pg_catalog.pg_try_advisory_lock_shared(bigint), \
        pg_catalog.pg_advisory_xact_lock(bigint), pg_catalog.pg_advisory_xact_lock_shared(bigint), \
        pg_catalog.pg_try_advisory_xact_lock(bigint), pg_catalog.pg_try_advisory_xact_lock_shared(bigint) FROM PUBLIC; \
    GRANT EXECUTE ON FUNCTION pg_catalog.pg_advisory_xact_lock(bigint), \
        pg_catalog.pg_try_advisory_xact_lock(bigint) TO app_owner;";

/// A purge left open by a role holds no other tenant's keys (tests/attacks/tenant_boundary.rs):
/// with tenant grants on, neither idem_purge() nor the purge the SQL edition's calls do in passing
/// may lock keys of tenants the caller has no grant on.
#[test]
fn an_open_transaction_holds_no_other_tenants_keys() {
    let server = plain_server(&[]);
    server
        .client()
        .batch_execute("CREATE ROLE bank_app LOGIN; CREATE ROLE mallory LOGIN")
        .unwrap();
    grant(&server, "bank_app", "bank");
    grant(&server, "mallory", "mallory");
    tenant_grants_on(&server);
    let mut bank = connect_with(&server, "bank_app", "postgres", "5s");
    // twenty expired keys of bank's
    for i in 0..20 {
        assert_eq!(
            claim_into(
                &mut bank,
                "e",
                &format!(
                    "idem_claim('bank', 'expired-{i}', 'h', '1 millisecond', '1 millisecond')"
                )
            ),
            "claimed"
        );
        one(
            &mut bank,
            &format!(
                "SELECT idem_complete('bank', 'expired-{i}', {}, 200)",
                fence("e")
            ),
        );
    }
    std::thread::sleep(Duration::from_millis(20));
    // mallory purges and claims its own keys, and leaves its transaction open
    let mut mallory = connect(&server, "mallory", "postgres");
    mallory.batch_execute("BEGIN").unwrap();
    assert_eq!(one(&mut mallory, "SELECT idem_purge()"), "0");
    for i in 0..64 {
        one(
            &mut mallory,
            &format!("SELECT c.outcome FROM idem_claim('mallory', 'k-{i}', 'h') AS c"),
        );
        one(
            &mut mallory,
            &format!("SELECT idem_consume('mallory', 'm-{i}')"),
        );
    }
    // bank retries each expired key at once: none waits for mallory
    let mut waited = Vec::new();
    for i in 0..20 {
        let answer = ask(
            &mut bank,
            &format!("SELECT c.outcome FROM idem_claim('bank', 'expired-{i}', 'h') AS c"),
        );
        if answer.first() != "claimed" {
            waited.push(format!("expired-{i}: {}", answer.first()));
        }
    }
    mallory.batch_execute("COMMIT").unwrap();
    assert!(waited.is_empty(), "{waited:#?}");
    assert_no_crash(&server);
}
