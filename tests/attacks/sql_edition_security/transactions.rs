//! Transactions: read-only, parallel and prepared.

use super::*;

/// In a read-only transaction every writing function refuses with 25006 and what needs no
/// write (replays, duplicates, reads) is answered: the same SQLSTATE, or the same first
/// column, as the native edition gives for each step.
///
/// Fails: idem.prevent_if_read_only raises through idem.raise_error with a NULL detail and
/// hint, and RAISE refuses a NULL option: 22004 "RAISE statement option cannot be null".
#[test]
fn read_only_transactions_refuse_writes_and_answer_replays() {
    let setup = [
        "SELECT c.outcome FROM idem_claim('t', 'done', 'h') AS c \
         WHERE pg_catalog.set_config('my.done', c.fence::text, false) IS NOT NULL",
        "SELECT idem_complete('t', 'done', pg_catalog.current_setting('my.done')::bigint, 201) IS NOT NULL",
        "SELECT c.outcome FROM idem_claim('t', 'live', 'h') AS c \
         WHERE pg_catalog.set_config('my.live', c.fence::text, false) IS NOT NULL",
        "SELECT idem_consume('t', 'consumed')",
        "SELECT c.outcome FROM idem_claim_seq('t', 's', 5) AS c",
    ];
    let live = "pg_catalog.current_setting('my.live')::bigint";
    let steps: Vec<String> = vec![
        "SELECT c.outcome FROM idem_claim('t', 'done', 'h') AS c".into(),
        "SELECT c.outcome FROM idem_claim('t', 'done', 'other') AS c".into(),
        "SELECT c.outcome FROM idem_claim('t', 'live', 'h') AS c".into(),
        "SELECT c.outcome FROM idem_claim('t', 'new', 'h') AS c".into(),
        "SELECT c.outcome FROM idem_claim_many('t', ARRAY['done'], ARRAY['h']) AS c".into(),
        "SELECT c.outcome FROM idem_claim_many('t', ARRAY['done', 'new'], ARRAY['h', 'h']) AS c"
            .into(),
        format!("SELECT idem_complete('t', 'live', {live}, 200) IS NOT NULL"),
        format!("SELECT idem_fail_final('t', 'live', {live}, 500) IS NOT NULL"),
        format!("SELECT idem_heartbeat('t', 'live', {live}) IS NOT NULL"),
        format!("SELECT 'ok' FROM idem_checkpoint('t', 'live', {live}, 'p')"),
        format!("SELECT 'ok' FROM idem_release('t', 'live', {live})"),
        format!("SELECT 'ok' FROM idem_assert_fence('t', 'live', {live})"),
        "SELECT idem_complete('t', 'live', 1, 200) IS NOT NULL".into(),
        "SELECT idem_complete('t', 'absent', 1, 200) IS NOT NULL".into(),
        "SELECT idem_forget('t', 'done')".into(),
        "SELECT idem_forget('t', 'absent')".into(),
        "SELECT idem_purge()".into(),
        "SELECT idem_consume('t', 'consumed')".into(),
        "SELECT idem_consume('t', 'new-message')".into(),
        "SELECT pg_catalog.count(*) FROM idem_consume_many('t', ARRAY['consumed'])".into(),
        "SELECT pg_catalog.count(*) FROM idem_consume_many('t', ARRAY['consumed', 'new-message'])"
            .into(),
        format!(
            "SELECT pg_catalog.count(*) FROM idem_complete_many('t', ARRAY['live'], ARRAY[{live}], ARRAY[200])"
        ),
        "SELECT c.outcome FROM idem_claim_seq('t', 's', 3) AS c".into(),
        "SELECT c.outcome FROM idem_claim_seq('t', 's', 9) AS c".into(),
        "SELECT idem_watermark('t', 's')".into(),
        "SELECT idem_reset_watermark('t', 's', 1)".into(),
        "SELECT pg_catalog.length(idem_request_hash('{}'))".into(),
        "SELECT idem_downstream_key('t', 'k', 'charge') IS NOT NULL".into(),
        "SELECT idem_new_key() IS NOT NULL".into(),
    ];
    let run = |server: &Server| -> Vec<String> {
        let mut db = connect(server, USER, "postgres");
        for sql in setup {
            one(&mut db, sql);
        }
        steps
            .iter()
            .map(|sql| {
                db.batch_execute("BEGIN READ ONLY").unwrap();
                let answer = ask(&mut db, sql);
                db.batch_execute("ROLLBACK").unwrap();
                match answer.code() {
                    Some(code) => format!("ERROR {code}"),
                    None => answer.first(),
                }
            })
            .collect()
    };
    let sql_edition = plain_server(&[]);
    let got = run(&sql_edition);
    assert_no_crash(&sql_edition);
    drop(sql_edition);
    let native_server = native(&[]);
    let expected = run(&native_server);
    let differ: Vec<String> = steps
        .iter()
        .zip(expected.iter().zip(&got))
        .filter(|(_, (e, g))| e != g)
        .map(|(sql, (e, g))| format!("{sql}\n    native: {e}\n    SQL edition: {g}"))
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    // and every write was refused
    for (sql, answer) in steps.iter().zip(&got) {
        if answer.starts_with("ERROR") {
            assert_eq!(answer, "ERROR 25006", "{sql}");
        }
    }
}

/// The setting that forces a parallel plan onto every query that allows one.
fn force_parallel() -> &'static str {
    if major() >= 16 {
        "SET debug_parallel_query = on"
    } else {
        "SET force_parallel_mode = on"
    }
}

/// idem_watermark is declared PARALLEL SAFE (sql/streams.sql), so a query may run it in a
/// parallel worker, or in the leader of a parallel plan; with tenant grants on its tenant
/// check must work there. The SQL edition's check opens a subtransaction (the probe for a
/// security-restricted operation), which parallel mode forbids: 25000; so it is declared
/// PARALLEL UNSAFE there. (The native edition answers in parallel mode:
/// tests/attacks/tenant_grants.rs, the_tenant_check_answers_in_a_parallel_query.)
#[test]
fn idem_watermark_answers_in_a_parallel_query() {
    let server = plain_server(&[]);
    grant(&server, USER, "t");
    tenant_grants_on(&server);
    let mut db = connect(&server, USER, "postgres");
    one(
        &mut db,
        "SELECT c.outcome FROM idem_claim_seq('t', 's', 7) AS c",
    );
    db.batch_execute(force_parallel()).unwrap();
    assert_eq!(ask(&mut db, "SELECT idem_watermark('t', 's')").first(), "7");
    // and a parallel scan calling it per row
    db.batch_execute(
        "CREATE TEMP TABLE streams AS SELECT 's'::text AS s FROM generate_series(1, 1000); \
         ANALYZE streams",
    )
    .unwrap();
    assert_eq!(
        ask(
            &mut db,
            "SELECT pg_catalog.max(idem_watermark('t', s)) FROM streams"
        )
        .first(),
        "7"
    );
    assert_no_crash(&server);
}

/// The functions PARALLEL SAFE without a tenant check answer in parallel mode.
#[test]
fn the_hashing_functions_answer_in_a_parallel_query() {
    let server = plain_server(&[]);
    tenant_grants_on(&server);
    let mut db = connect(&server, USER, "postgres");
    let serial = one(
        &mut db,
        "SELECT idem_request_hash('{\"a\": [1, 2.50]}') || idem_request_hash('POST', '/x', '{}') \
                || idem_downstream_key('t', 'k', 'charge')::text",
    );
    db.batch_execute(force_parallel()).unwrap();
    let parallel = one(
        &mut db,
        "SELECT idem_request_hash('{\"a\": [1, 2.50]}') || idem_request_hash('POST', '/x', '{}') \
                || idem_downstream_key('t', 'k', 'charge')::text",
    );
    assert_eq!(serial, parallel);
    assert_no_crash(&server);
}

/// A session that has ever run LISTEN (an application's notification listener) claims in a
/// transaction it then prepares (two-phase commit): the SQL edition's probe for a
/// security-restricted operation runs UNLISTEN, which queues an action in such a session, and
/// PREPARE TRANSACTION refuses a transaction that "executed LISTEN, UNLISTEN, or NOTIFY".
/// Natively this works.
#[test]
fn a_transaction_of_a_listening_session_can_be_prepared() {
    let server = plain_server(&["max_prepared_transactions = 4"]);
    grant(&server, USER, "t");
    tenant_grants_on(&server);
    let mut db = connect(&server, USER, "postgres");
    db.batch_execute("LISTEN app_events").unwrap();
    db.batch_execute("BEGIN").unwrap();
    assert_eq!(
        one(
            &mut db,
            "SELECT c.outcome FROM idem_claim('t', 'k', 'h') AS c"
        ),
        "claimed"
    );
    let prepared = ask(&mut db, "PREPARE TRANSACTION 'claim-k'");
    let _ = ask(&mut db, "ROLLBACK");
    let _ = ask(&mut db, "COMMIT PREPARED 'claim-k'");
    assert_eq!(prepared.code(), None, "{prepared:?}");
    assert_no_crash(&server);
}

/// The same without LISTEN: two-phase commit works with tenant grants on.
#[test]
fn a_claim_can_be_prepared_and_committed() {
    let server = plain_server(&["max_prepared_transactions = 4"]);
    grant(&server, USER, "t");
    tenant_grants_on(&server);
    let mut db = connect(&server, USER, "postgres");
    db.batch_execute("BEGIN").unwrap();
    assert_eq!(
        claim_into(&mut db, "f", "idem_claim('t', 'k', 'h')"),
        "claimed"
    );
    one(
        &mut db,
        &format!(
            "SELECT idem_complete('t', 'k', {}, 200) IS NOT NULL",
            fence("f")
        ),
    );
    db.batch_execute("PREPARE TRANSACTION 'claim-k'").unwrap();
    let mut other = connect(&server, USER, "postgres");
    assert_eq!(
        one(
            &mut other,
            "SELECT c.outcome FROM idem_claim('t', 'k', 'h') AS c"
        ),
        "in_progress",
        "a prepared claim holds its key"
    );
    db.batch_execute("COMMIT PREPARED 'claim-k'").unwrap();
    assert_eq!(
        one(
            &mut other,
            "SELECT c.outcome FROM idem_claim('t', 'k', 'h') AS c"
        ),
        "completed"
    );
    assert_no_crash(&server);
}
