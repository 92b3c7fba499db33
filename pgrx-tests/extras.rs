// Batch claims, watermarks, checkpoints and statistics inside one transaction.

#[pg_test]
fn claim_many_keeps_input_order() {
    let outcomes = one_text(
        "SELECT string_agg(key || ':' || outcome, ',') FROM idem_claim_many('claim_many_keeps_input_order', ARRAY['a', 'b', 'a'], ARRAY['h', 'h', 'x'])",
    );
    assert_eq!(outcomes.as_deref(), Some("a:claimed,b:claimed,a:mismatch"));
    assert_eq!(sqlstate_of("SELECT idem_claim_many('claim_many_keeps_input_order', ARRAY['a'], ARRAY['h', 'h'])"), "22023");
    Spi::run("SET LOCAL pg_idem.max_batch_keys = 2").unwrap();
    assert_eq!(sqlstate_of("SELECT idem_claim_many('claim_many_keeps_input_order', ARRAY['a', 'b', 'c'], ARRAY['h', 'h', 'h'])"), "54000");
}

#[pg_test]
fn watermarks_move_only_forward() {
    assert_eq!(one_text("SELECT outcome FROM idem_claim_seq('watermarks_move_only_forward', 's', 5)").as_deref(), Some("new"));
    assert_eq!(one_text("SELECT outcome FROM idem_claim_seq('watermarks_move_only_forward', 's', 5)").as_deref(), Some("duplicate"));
    assert_eq!(one_i64("SELECT watermark FROM idem_claim_seq('watermarks_move_only_forward', 's', 4)"), Some(5));
    assert_eq!(one_i64("SELECT idem_reset_watermark('watermarks_move_only_forward', 's', 1)"), Some(5));
    assert_eq!(one_i64("SELECT idem_watermark('watermarks_move_only_forward', 's')"), Some(1));
    assert_eq!(one_text("SELECT outcome FROM idem_claim_seq('watermarks_move_only_forward', 's', 2)").as_deref(), Some("new"));
}

#[pg_test]
fn counters_count_outcomes() {
    // tests run side by side in one server: look at this test's own tenant only
    let counts = || {
        Spi::get_three::<i64, i64, i64>(
            "SELECT sum(claims)::bigint, sum(in_progress)::bigint, sum(mismatches)::bigint \
             FROM idem_tenant_counters() WHERE tenant = 'counters_count_outcomes'",
        )
        .unwrap()
    };
    let before = counts();
    claim3("counters_count_outcomes", "k", "h");
    claim3("counters_count_outcomes", "k", "h");
    claim3("counters_count_outcomes", "k", "x");
    let after = counts();
    let delta = |a: Option<i64>, b: Option<i64>| a.unwrap_or(0) - b.unwrap_or(0);
    assert_eq!((delta(after.0, before.0), delta(after.1, before.1), delta(after.2, before.2)), (1, 1, 1));
    assert_eq!(
        one_i64("SELECT keys_in_progress FROM idem_tenant_stats() WHERE tenant = 'counters_count_outcomes'"),
        Some(1)
    );
}
