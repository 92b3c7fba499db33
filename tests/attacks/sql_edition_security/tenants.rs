//! Tenants as an access boundary: grants, membership, SET ROLE, revokes, definer wrappers.

use super::*;
use pg_idem_tests::TENANT_CALLS;

/// payments may act on 'pay', orders on 'ord', the group team (and so member, and switcher
/// after SET ROLE: it does not inherit) on 'shared'.
fn tenant_roles(server: &Server) {
    server
        .client()
        .batch_execute(
            "CREATE ROLE payments LOGIN; CREATE ROLE orders LOGIN; \
             CREATE ROLE team NOLOGIN; CREATE ROLE member LOGIN IN ROLE team; \
             CREATE ROLE switcher LOGIN NOINHERIT IN ROLE team; \
             CREATE SCHEMA payments_s AUTHORIZATION payments; \
             CREATE SCHEMA orders_s AUTHORIZATION orders",
        )
        .unwrap();
    grant(server, "payments", "pay");
    grant(server, "orders", "ord");
    grant(server, "team", "shared");
    tenant_grants_on(server);
}

/// Whether `sql` was refused as a tenant check refuses (42501, the tenant in the message).
fn denied_tenant(db: &mut Client, sql: &str, tenant: &str) -> bool {
    match ask(db, sql) {
        Answer::Error { code, message } => {
            code == "42501" && message == format!("permission denied for tenant \"{tenant}\"")
        }
        Answer::Rows(_) => false,
    }
}

#[test]
fn a_role_acts_only_on_its_tenants() {
    let server = plain_server(&[]);
    tenant_roles(&server);
    let mut payments = connect(&server, "payments", "postgres");
    for call in TENANT_CALLS {
        assert!(
            denied_tenant(&mut payments, &call.replace("$T", "ord"), "ord"),
            "{call} on another role's tenant was not refused with 42501"
        );
        assert!(
            !denied_tenant(&mut payments, &call.replace("$T", "pay"), "pay"),
            "{call} on its own tenant"
        );
    }
    // a completed key of one tenant is neither forgotten nor replayed by another's role
    let mut orders = connect(&server, "orders", "postgres");
    assert_eq!(
        claim_into(&mut orders, "f", "idem_claim('ord', 'order-1', 'h')"),
        "claimed"
    );
    one(
        &mut orders,
        &format!(
            "SELECT idem_complete('ord', 'order-1', {}, 201, '{{\"card\": \"secret\"}}')",
            fence("f")
        ),
    );
    assert!(denied_tenant(
        &mut payments,
        "SELECT idem_forget('ord', 'order-1')",
        "ord"
    ));
    assert!(denied_tenant(
        &mut payments,
        "SELECT * FROM idem_claim('ord', 'order-1', 'h')",
        "ord"
    ));
    assert_eq!(
        one(
            &mut orders,
            "SELECT c.outcome FROM idem_claim('ord', 'order-1', 'h') AS c"
        ),
        "completed"
    );
    // idem_downstream_key checks no grant, as natively: it only hashes its arguments (a
    // downstream key is as public as the algorithm; it grants nothing in pg_idem)
    let theirs = one(
        &mut payments,
        "SELECT idem_downstream_key('ord', 'order-1', 'charge')",
    );
    let own = one(
        &mut orders,
        "SELECT idem_downstream_key('ord', 'order-1', 'charge')",
    );
    assert_eq!(theirs, own);
    // a role with no tenant purges nothing; a role purges its own tenants' expired keys only
    let mut payments_expired = connect(&server, "payments", "postgres");
    assert_eq!(
        claim_into(
            &mut payments_expired,
            "e",
            "idem_claim('pay', 'expired', 'h', '1 millisecond', '1 millisecond')"
        ),
        "claimed"
    );
    one(
        &mut payments_expired,
        &format!(
            "SELECT idem_complete('pay', 'expired', {}, 200)",
            fence("e")
        ),
    );
    assert_eq!(
        claim_into(
            &mut orders,
            "e",
            "idem_claim('ord', 'expired', 'h', '1 millisecond', '1 millisecond')"
        ),
        "claimed"
    );
    one(
        &mut orders,
        &format!(
            "SELECT idem_complete('ord', 'expired', {}, 200)",
            fence("e")
        ),
    );
    std::thread::sleep(Duration::from_millis(20));
    let mut nobody = connect(&server, USER, "postgres");
    assert_eq!(one(&mut nobody, "SELECT idem_purge()"), "0");
    assert_eq!(one(&mut payments, "SELECT idem_purge()"), "1");
    let left = one(
        &mut connect(&server, ADMIN, "postgres"),
        "SELECT string_agg(tenant || '/' || key, ',' ORDER BY tenant, key) FROM idem.keys",
    );
    // (pay/m: consumed by the calls above)
    assert_eq!(left, "ord/expired,ord/order-1,pay/m");
    assert_no_crash(&server);
}

#[test]
fn grants_follow_membership_set_role_and_revokes() {
    let server = plain_server(&[]);
    tenant_roles(&server);
    let mut member = connect(&server, "member", "postgres");
    assert_eq!(
        one(
            &mut member,
            "SELECT c.outcome FROM idem_claim('shared', 'k1', 'h') AS c"
        ),
        "claimed",
        "through its group"
    );
    // NOINHERIT: the group's grant counts only after SET ROLE
    let mut switcher = connect(&server, "switcher", "postgres");
    assert!(denied_tenant(
        &mut switcher,
        "SELECT * FROM idem_claim('shared', 'k2', 'h')",
        "shared"
    ));
    switcher.batch_execute("SET ROLE team").unwrap();
    assert_eq!(
        one(
            &mut switcher,
            "SELECT c.outcome FROM idem_claim('shared', 'k2', 'h') AS c"
        ),
        "claimed"
    );
    switcher.batch_execute("RESET ROLE").unwrap();
    assert!(denied_tenant(
        &mut switcher,
        "SELECT * FROM idem_claim('shared', 'k2b', 'h')",
        "shared"
    ));
    // SET LOCAL ROLE ends with its transaction
    switcher
        .batch_execute(
            "BEGIN; SET LOCAL ROLE team; SELECT * FROM idem_claim('shared', 'k2c', 'h'); COMMIT",
        )
        .unwrap();
    assert!(denied_tenant(
        &mut switcher,
        "SELECT * FROM idem_claim('shared', 'k2d', 'h')",
        "shared"
    ));
    // a revoke, or a lost membership, counts from the next statement (READ COMMITTED)
    let mut admin = connect(&server, ADMIN, "postgres");
    assert_eq!(
        one(&mut admin, "SELECT idem_revoke_tenant('team', 'shared')"),
        "t"
    );
    assert!(denied_tenant(
        &mut member,
        "SELECT * FROM idem_claim('shared', 'k3', 'h')",
        "shared"
    ));
    assert_eq!(
        one(&mut admin, "SELECT idem_grant_tenant('team', 'shared')"),
        "t"
    );
    assert_eq!(
        one(&mut admin, "SELECT idem_grant_tenant('team', 'shared')"),
        "f"
    );
    assert_eq!(
        one(
            &mut member,
            "SELECT c.outcome FROM idem_claim('shared', 'k3', 'h') AS c"
        ),
        "claimed"
    );
    server
        .client()
        .batch_execute("REVOKE team FROM member")
        .unwrap();
    assert!(denied_tenant(
        &mut member,
        "SELECT * FROM idem_claim('shared', 'k4', 'h')",
        "shared"
    ));
    // a superuser acts on every tenant, as natively
    assert_eq!(
        one(
            &mut server.client(),
            "SELECT c.outcome FROM idem_claim('ord', 'su', 'h') AS c"
        ),
        "claimed"
    );
    assert_no_crash(&server);
}

/// An application's SECURITY DEFINER function owned by a role with a grant lends it to no
/// caller: natively the check asks about the session's role (GetOuterUserId), which a definer
/// function does not change; the SQL edition asks current_setting('role') / session_user.
#[test]
fn a_definer_wrapper_lends_no_tenant() {
    let server = plain_server(&[]);
    tenant_roles(&server);
    let mut payments = connect(&server, "payments", "postgres");
    payments
        .batch_execute(
            "CREATE FUNCTION payments_s.claim_pay(k text) RETURNS text LANGUAGE sql \
                 SECURITY DEFINER SET search_path = pg_catalog, public \
                 AS $$ SELECT c.outcome FROM public.idem_claim('pay', k, 'h') AS c $$; \
             CREATE FUNCTION payments_s.forget_pay(k text) RETURNS boolean LANGUAGE plpgsql \
                 SECURITY DEFINER SET search_path = pg_catalog, public \
                 AS $$ BEGIN RETURN public.idem_forget('pay', k); END $$; \
             GRANT USAGE ON SCHEMA payments_s TO PUBLIC",
        )
        .unwrap();
    assert_eq!(
        one(&mut payments, "SELECT payments_s.claim_pay('own')"),
        "claimed"
    );
    let mut orders = connect(&server, "orders", "postgres");
    assert!(denied_tenant(
        &mut orders,
        "SELECT payments_s.claim_pay('via-wrapper')",
        "pay"
    ));
    assert!(denied_tenant(
        &mut orders,
        "SELECT payments_s.forget_pay('own')",
        "pay"
    ));
    // nor the other way round: the caller's grant does not follow it into another tenant
    assert!(denied_tenant(
        &mut payments,
        "SELECT * FROM idem_claim('ord', 'k', 'h')",
        "ord"
    ));
    assert_eq!(
        one(
            &mut payments,
            "SELECT c.outcome FROM idem_claim('pay', 'own', 'h') AS c"
        ),
        "in_progress"
    );
    assert_no_crash(&server);
}

/// A revoke committed after a REPEATABLE READ transaction took its snapshot counts from its next
/// statement, in both editions: natively the grants are read with a fresh snapshot; the SQL
/// edition confirms a grant its snapshot shows with a row lock (FOR KEY SHARE), which meets the
/// newest version: a grant deleted since is refused. A lost membership counts at once either way
/// (pg_has_role reads the catalogs fresh).
#[test]
fn a_revoke_inside_an_older_repeatable_read_snapshot() {
    let server = plain_server(&[]);
    tenant_roles(&server);
    let mut payments = connect(&server, "payments", "postgres");
    payments
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .unwrap();
    let mut admin = connect(&server, ADMIN, "postgres");
    assert_eq!(
        one(&mut admin, "SELECT idem_revoke_tenant('payments', 'pay')"),
        "t"
    );
    assert!(denied_tenant(
        &mut payments,
        "SELECT * FROM idem_claim('pay', 'inside', 'h')",
        "pay"
    ));
    payments.batch_execute("ROLLBACK").unwrap();
    assert!(denied_tenant(
        &mut payments,
        "SELECT * FROM idem_claim('pay', 'after', 'h')",
        "pay"
    ));
    // a lost membership counts inside the older snapshot too
    let mut member = connect(&server, "member", "postgres");
    member
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1")
        .unwrap();
    server
        .client()
        .batch_execute("REVOKE team FROM member")
        .unwrap();
    assert!(denied_tenant(
        &mut member,
        "SELECT * FROM idem_claim('shared', 'inside', 'h')",
        "shared"
    ));
    member.batch_execute("ROLLBACK").unwrap();
    assert_no_crash(&server);
}
