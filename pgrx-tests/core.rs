// The core API inside one transaction: every outcome, rule and error code.

#[pg_test]
fn every_claim_outcome() {
    let (o, f1, a) = claim3("every_claim_outcome", "k", "h");
    assert_eq!((o.as_str(), a), ("claimed", Some(1)));
    let f1 = f1.expect("fence");
    let (o, f, _) = claim3("every_claim_outcome", "k", "h");
    assert_eq!((o.as_str(), f), ("in_progress", None), "a claim held by this transaction");
    assert_eq!(claim3("every_claim_outcome", "k", "other").0, "mismatch");
    Spi::run(&format!("SELECT idem_complete('every_claim_outcome', 'k', {f1}, 201, '{{\"id\": 1}}')")).unwrap();
    assert_eq!(claim3("every_claim_outcome", "k", "h").0, "completed");
    assert_eq!(
        one_text("SELECT response_body::text FROM idem_claim('every_claim_outcome', 'k', 'h')").as_deref(),
        Some(r#"{"id": 1}"#)
    );
    let (_, f2, _) = claim3("every_claim_outcome", "k2", "h");
    Spi::run(&format!("SELECT idem_fail_final('every_claim_outcome', 'k2', {}, 402, NULL)", f2.unwrap())).unwrap();
    assert_eq!(claim3("every_claim_outcome", "k2", "h").0, "failed");
    assert_eq!(one_i64("SELECT response_code::bigint FROM idem_claim('every_claim_outcome', 'k2', 'h')"), Some(402));
    Spi::run("SET LOCAL pg_idem.reject_stale_uuidv7 = on").unwrap();
    assert_eq!(claim3("every_claim_outcome", "00000000-0000-7000-8000-000000000000", "h").0, "stale_key");
}

#[pg_test]
fn mismatch_and_replays_reveal_no_fence() {
    let (_, f, _) = claim3("mismatch_and_replays_reveal_no_fence", "k", "h");
    Spi::run(&format!("SELECT idem_complete('mismatch_and_replays_reveal_no_fence', 'k', {}, 200)", f.unwrap())).unwrap();
    let hidden = one_i64("SELECT count(*) FROM idem_claim('mismatch_and_replays_reveal_no_fence', 'k', 'x') WHERE fence IS NULL AND attempt IS NULL \
                          AND response_code IS NULL AND response_body IS NULL AND expires_at IS NULL");
    assert_eq!(hidden, Some(1));
    assert_eq!(one_i64("SELECT count(*) FROM idem_claim('mismatch_and_replays_reveal_no_fence', 'k', 'h') WHERE fence IS NULL"), Some(1));
}

// A #[pg_test] is one transaction, and a takeover needs another one: takeovers are tested through
// real sessions (tests/sessions.rs, tests/extras.rs). Inside the transaction that holds the key,
// an expired lease is no reason to take its own key over.
#[pg_test]
fn own_claim_past_its_lease_stays_in_progress() {
    let t = "own_claim_past_its_lease_stays_in_progress";
    let f1 = one_i64(&format!("SELECT fence FROM idem_claim('{t}', 'k', 'h', '10 ms')")).unwrap();
    Spi::run("SELECT pg_sleep(0.05)").unwrap();
    assert_eq!(claim3(t, "k", "other").0, "mismatch", "another hash is still a mismatch");
    let (o, f2, a) = claim3(t, "k", "h");
    assert_eq!((o.as_str(), f2, a), ("in_progress", None, Some(1)), "no takeover of its own claim");
    assert_eq!(sqlstate_of(&format!("SELECT idem_complete('{t}', 'k', {f1}, 200)")), "00000", "its fence still holds");
}

#[pg_test]
fn release_forget_and_purge() {
    let f1 = claim3("release_forget_and_purge", "k", "h").1.unwrap();
    Spi::run(&format!("SELECT idem_release('release_forget_and_purge', 'k', {f1})")).unwrap();
    let (o, f2, a) = claim3("release_forget_and_purge", "k", "h");
    assert_eq!((o.as_str(), a), ("claimed", Some(1)), "a released key is claimed afresh");
    assert!(f2.unwrap() > f1);
    assert_eq!(Spi::get_one::<bool>("SELECT idem_forget('release_forget_and_purge', 'k')").unwrap(), Some(true));
    assert_eq!(Spi::get_one::<bool>("SELECT idem_forget('release_forget_and_purge', 'k')").unwrap(), Some(false));
    // expired: completed with a 1 ms ttl; kept: a live lease outliving its ttl
    let f3 = one_i64("SELECT fence FROM idem_claim('release_forget_and_purge', 'gone', 'h', '1 ms', '1 ms')").unwrap();
    Spi::run(&format!("SELECT idem_complete('release_forget_and_purge', 'gone', {f3}, 200)")).unwrap();
    Spi::run("SELECT idem_claim('release_forget_and_purge', 'kept', 'h', '1 min', '1 ms')").unwrap();
    Spi::run("SELECT pg_sleep(0.02)").unwrap();
    assert_eq!(one_i64("SELECT idem_purge()"), Some(1));
    assert_eq!(one_i64("SELECT count(*) FROM idem.keys WHERE key = 'kept'"), Some(1));
    assert_eq!(one_i64("SELECT idem_purge(0)"), Some(0));
}

#[pg_test]
fn expired_key_counts_as_absent() {
    let f = one_i64("SELECT fence FROM idem_claim('expired_key_counts_as_absent', 'k', 'h', '1 ms', '1 ms')").unwrap();
    Spi::run(&format!("SELECT idem_complete('expired_key_counts_as_absent', 'k', {f}, 200)")).unwrap();
    Spi::run("SELECT pg_sleep(0.02)").unwrap();
    let (o, _, a) = claim3("expired_key_counts_as_absent", "k", "another hash");
    assert_eq!((o.as_str(), a), ("claimed", Some(1)));
}

#[pg_test]
fn fenced_operations_return_the_new_times() {
    let f = claim3("fenced_operations_return_the_new_times", "k", "h").1.unwrap();
    let lease = Spi::get_one::<bool>(&format!(
        "SELECT t BETWEEN clock_timestamp() + '4 min' AND clock_timestamp() + '6 min' \
         FROM idem_heartbeat('fenced_operations_return_the_new_times', 'k', {f}, '5 min') AS t"
    ))
    .unwrap();
    assert_eq!(lease, Some(true));
    let expires = Spi::get_one::<bool>(&format!(
        "SELECT t BETWEEN clock_timestamp() + '23 hours' AND clock_timestamp() + '25 hours' \
         FROM idem_complete('fenced_operations_return_the_new_times', 'k', {f}, 200) AS t"
    ))
    .unwrap();
    assert_eq!(expires, Some(true), "a completed key is replayed for the default ttl of 24 hours");
}

#[pg_test]
fn errors_have_their_documented_sqlstates() {
    let f = claim3("errors_have_their_documented_sqlstates", "held", "h").1.unwrap();
    for (sql, state) in [
        ("SELECT idem_claim(NULL, 'k', 'h')", "22004"),
        ("SELECT idem_claim('errors_have_their_documented_sqlstates', NULL, 'h')", "22004"),
        ("SELECT idem_claim('errors_have_their_documented_sqlstates', 'k', NULL)", "22004"),
        ("SELECT idem_claim('', 'k', 'h')", "22023"),
        ("SELECT idem_claim('errors_have_their_documented_sqlstates', '', 'h')", "22023"),
        ("SELECT idem_claim(repeat('x', 256), 'k', 'h')", "22023"),
        ("SELECT idem_claim('errors_have_their_documented_sqlstates', repeat('x', 256), 'h')", "22023"),
        ("SELECT idem_claim('errors_have_their_documented_sqlstates', 'k', repeat('h', 513))", "22023"),
        ("SELECT idem_claim('errors_have_their_documented_sqlstates', 'k', 'h', '0')", "22023"),
        ("SELECT idem_claim('errors_have_their_documented_sqlstates', 'k', 'h', NULL, '-1 day')", "22023"),
        ("SELECT idem_complete('errors_have_their_documented_sqlstates', 'held', NULL, 200)", "22004"),
        ("SELECT idem_complete('errors_have_their_documented_sqlstates', 'nope', 1, 200)", "P0002"),
        ("SELECT idem_heartbeat('errors_have_their_documented_sqlstates', 'nope', 1)", "P0002"),
        ("SELECT idem_release('errors_have_their_documented_sqlstates', 'nope', 1)", "P0002"),
        ("SELECT idem_checkpoint('errors_have_their_documented_sqlstates', 'nope', 1, 'p')", "P0002"),
        ("SELECT idem_assert_fence('errors_have_their_documented_sqlstates', 'nope', 1)", "P0002"),
        ("SELECT idem_purge(-1)", "22023"),
        ("SELECT idem_downstream_key('errors_have_their_documented_sqlstates', 'k', NULL)", "22004"),
        ("SELECT idem_claim_seq('errors_have_their_documented_sqlstates', 's', NULL)", "22004"),
        ("SELECT idem_reset_watermark('errors_have_their_documented_sqlstates', NULL, 1)", "22004"),
    ] {
        assert_eq!(sqlstate_of(sql), state, "{sql}");
    }
    for sql in [
        format!("SELECT idem_complete('errors_have_their_documented_sqlstates', 'held', {}, 200)", f + 1),
        format!("SELECT idem_heartbeat('errors_have_their_documented_sqlstates', 'held', {}, '1 s')", f - 1),
        format!("SELECT idem_assert_fence('errors_have_their_documented_sqlstates', 'held', {})", f + 7),
    ] {
        assert_eq!(sqlstate_of(&sql), "55000", "{sql}");
    }
    Spi::run("SET LOCAL pg_idem.max_response_bytes = 100").unwrap();
    let big = format!("SELECT idem_complete('errors_have_their_documented_sqlstates', 'held', {f}, 200, jsonb_build_object('x', repeat('y', 200)))");
    assert_eq!(sqlstate_of(&big), "54000");
    assert_eq!(claim3("errors_have_their_documented_sqlstates", "held", "h").0, "in_progress", "nothing stored by the refused complete");
}

#[pg_test]
fn settings_are_defined_with_their_defaults() {
    for (name, value) in [
        ("pg_idem.lease_timeout", "1min"),
        ("pg_idem.ttl", "1d"),
        ("pg_idem.max_key_length", "255"),
        ("pg_idem.max_response_bytes", "1MB"),
        ("pg_idem.purge_interval", "1min"),
        ("pg_idem.purge_batch_size", "5000"),
        ("pg_idem.max_batch_keys", "1000"),
        ("pg_idem.reject_stale_uuidv7", "off"),
    ] {
        assert_eq!(one_text(&format!("SHOW {name}")).as_deref(), Some(value), "{name}");
    }
    assert_eq!(sqlstate_of("SET pg_idem.nonexistent = 1"), "42602");
    Spi::run("SET LOCAL pg_idem.lease_timeout = '3s'").unwrap();
    let lease = Spi::get_one::<bool>(
        "SELECT lease_expires_at - clock_timestamp() BETWEEN '2 s' AND '4 s' FROM idem_claim('settings_are_defined_with_their_defaults', 'k', 'h')",
    )
    .unwrap();
    assert_eq!(lease, Some(true));
}

#[pg_test]
fn completes_are_hot_updates() {
    // the columns idem_complete changes are not indexed, so its updates stay on the page
    Spi::run(
        "SELECT idem_complete('completes_are_hot_updates', 'k' || g, (idem_claim('completes_are_hot_updates', 'k' || g, 'h')).fence, 200, '{\"ok\": true}')
         FROM generate_series(1, 500) AS g",
    )
    .unwrap();
    let row = Spi::get_two::<i64, i64>(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = 'idem.keys'::regclass",
    )
    .unwrap();
    let (updates, hot) = (row.0.unwrap_or(0), row.1.unwrap_or(0));
    assert_eq!(updates, 500);
    assert!(hot * 100 >= updates * 95, "only {hot} of {updates} completes were HOT");
}
