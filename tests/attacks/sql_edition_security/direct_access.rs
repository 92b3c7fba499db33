//! Direct access: an application's role cannot touch pg_idem's state nor the owner-only settings.

use super::*;

/// An application role cannot read or write pg_idem's tables, call its internals, take fences
/// or grant itself tenants; setting pg_idem.* placeholders changes no boundary or limit.
#[test]
fn app_roles_cannot_touch_the_state_or_the_owner_settings() {
    let server = plain_server(&[]);
    server
        .client()
        .batch_execute("CREATE ROLE bank_app LOGIN")
        .unwrap();
    grant(&server, "bank_app", "bank");
    tenant_grants_on(&server);
    let mut bank = connect(&server, "bank_app", "postgres");
    assert_eq!(
        one(
            &mut bank,
            "SELECT c.outcome FROM idem_claim('bank', 'k', 'h') AS c"
        ),
        "claimed"
    );
    let mut user = connect(&server, USER, "postgres");
    for sql in [
        "SELECT * FROM idem.keys",
        "SELECT * FROM idem.settings",
        "SELECT * FROM idem.tenant_grants",
        "SELECT * FROM idem.watermarks",
        "INSERT INTO idem.keys (tenant, key, state, purge_after) VALUES ('bank', 'x', 'c', now())",
        "UPDATE idem.settings SET value = 'off'",
        "DELETE FROM idem.keys",
        "TRUNCATE idem.keys",
        "INSERT INTO idem.tenant_grants VALUES ('app_user', 'bank')",
        "SELECT nextval('idem.fence_seq')",
        "SELECT setval('idem.fence_seq', 1)",
        "SELECT idem.owner_settings()",
        "SELECT idem.check_access('bank', false)",
        "SELECT idem.read_key('bank', 'k', false)",
        "SELECT idem.consume('idem_consume', 'bank', 'm', 1000000, now())",
        "SELECT idem.purge(NULL, NULL, now())",
        "SELECT idem.key_lock_id('bank', 'k')",
        "SELECT idem.fenced('x', 'bank', 'k', 1, 'release', now())",
        "CREATE TABLE idem.mine (x int)",
        "CREATE FUNCTION idem.check_access(text, boolean) RETURNS void LANGUAGE sql AS ''",
        "SELECT idem_grant_tenant('app_user', 'bank')",
        "SELECT idem_revoke_tenant('bank_app', 'bank')",
        "SELECT * FROM idem_tenant_grants()",
        "SELECT * FROM idem_stalled()",
        "SELECT * FROM idem_stats()",
        "SELECT * FROM idem_tenant_stats()",
        "SELECT idem_stats_reset()",
        "ALTER TABLE idem.keys ADD COLUMN x int",
        "ALTER FUNCTION public.idem_claim(text, text, text, interval, interval) SECURITY INVOKER",
    ] {
        assert_eq!(fails(&mut user, sql), "42501", "{sql}");
    }
    // the placeholders of the owner's settings are the session's own strings, read by nobody
    let mut user = connect(&server, USER, "postgres");
    user.batch_execute(
        "SET pg_idem.tenant_grants = off; SET pg_idem.max_key_length = 100000; \
         SET pg_idem.max_response_bytes = 2000000000; SET pg_idem.max_batch_keys = 100000000",
    )
    .expect("placeholders may be set");
    let _ = ask(
        &mut user,
        "ALTER ROLE app_user SET pg_idem.tenant_grants = off",
    );
    for sql in [
        "SELECT * FROM idem_claim('bank', 'k', 'h')",
        "SELECT idem_forget('bank', 'k')",
        "SELECT idem_consume('bank', 'm')",
    ] {
        assert_eq!(fails(&mut user, sql), "42501", "{sql}");
    }
    grant(&server, USER, "mine");
    let mut user = connect(&server, USER, "postgres");
    user.batch_execute(
        "SET pg_idem.max_key_length = 100000; SET pg_idem.max_response_bytes = 2000000000; \
         SET pg_idem.max_batch_keys = 100000000",
    )
    .unwrap();
    assert_eq!(
        fails(
            &mut user,
            "SELECT * FROM idem_claim('mine', repeat('k', 300), 'h')"
        ),
        "22023"
    );
    assert_eq!(
        fails(
            &mut user,
            "SELECT * FROM idem_consume_many('mine', array_fill('m'::text, ARRAY[1001]))"
        ),
        "54000"
    );
    assert_eq!(
        claim_into(&mut user, "f", "idem_claim('mine', 'k', 'h')"),
        "claimed"
    );
    assert_eq!(
        fails(
            &mut user,
            &format!(
                "SELECT idem_complete('mine', 'k', {}, 200, jsonb_build_object('x', repeat('a', 1100000)))",
                fence("f")
            )
        ),
        "54000"
    );
    // a body compressed in a table counts with its size once decompressed, as natively
    user.batch_execute(
        "CREATE TEMP TABLE big AS SELECT jsonb_build_object('x', repeat('a', 5000000)) AS j",
    )
    .unwrap();
    assert_eq!(
        fails(
            &mut user,
            &format!(
                "SELECT idem_complete('mine', 'k', {}, 200, b.j) FROM big b",
                fence("f")
            )
        ),
        "54000"
    );
    // bank's key is untouched by all of it
    assert_eq!(
        one(
            &mut bank,
            "SELECT c.outcome FROM idem_claim('bank', 'k', 'h') AS c"
        ),
        "in_progress"
    );
    assert_no_crash(&server);
}
