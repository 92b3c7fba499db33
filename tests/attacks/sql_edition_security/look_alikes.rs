//! Look-alikes: a hostile role's objects on every search path it controls, and hostile session
//! settings, change no answer and gain no rights.

use super::*;

/// The functions of pg_catalog the SQL edition calls (by name, qualified or through the
/// syntax): every one gets a look-alike.
fn called_functions() -> Vec<String> {
    let mut names: Vec<String> = edition()
        .split("pg_catalog.")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|n| !n.is_empty())
        .collect();
    // reached through the syntax or not qualified in the bodies
    names.extend(
        [
            "now",
            "clock_timestamp",
            "current_setting",
            "set_config",
            "pg_has_role",
            "nextval",
            "sha256",
            "encode",
            "decode",
            "substr",
            "replace",
            "octet_length",
            "char_length",
            "length",
            "jsonb_typeof",
            "trim_scale",
            "make_interval",
            "gen_random_uuid",
            "int8send",
            "get_byte",
            "set_byte",
            "to_timestamp",
            "cardinality",
            "pg_column_size",
            "pg_backend_pid",
            "quote_nullable",
            "translate",
            "to_json",
            "current_database",
            "pg_advisory_xact_lock",
            "pg_try_advisory_xact_lock",
            "textlen",
            "texteq",
            "int8eq",
            "timestamptz_lt",
            "date_part",
            "extract",
            "array_fill",
            "greatest",
            "least",
        ]
        .map(String::from),
    );
    names.sort();
    names.dedup();
    names
}

/// Plants, in each schema of `targets` (`pg_temp`: the session's own, functions only), a
/// look-alike of every pg_catalog operator on the types pg_idem's SQL uses and of every function it calls,
/// each counting its calls in `m.hits` and then answering as the original. Run by the schema's
/// owner; `m.hits` must exist and be usable by PUBLIC (a look-alike run with the owner's
/// rights counts too).
fn plant_look_alikes(db: &mut Client, targets: &[&str]) {
    let names = called_functions()
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(",");
    let targets = format!(
        "ARRAY[{}]",
        targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    db.batch_execute(&format!(
        r#"
        DO $plant$
        DECLARE
            concrete regtype[] := ARRAY['text', 'bigint', 'integer', 'smallint', 'bytea',
                'timestamptz', 'interval', 'jsonb', 'numeric', '"char"', 'boolean', 'name',
                'oid', 'uuid', 'double precision', 'regclass', 'regrole', 'bit']::regtype[];
            o record;
            f record;
            target text;
            n integer := 0;
            fn text;
            args text;
            params text;
        BEGIN
            FOREACH target IN ARRAY {targets} LOOP
                IF target <> 'pg_temp' THEN
                    FOR o IN
                        SELECT op.oprname, op.oprleft, op.oprright, op.oprresult, p.proname
                          FROM pg_catalog.pg_operator op
                          JOIN pg_catalog.pg_proc p ON p.oid = op.oprcode
                         WHERE op.oprnamespace = 'pg_catalog'::regnamespace
                           AND (op.oprleft = 0 OR op.oprleft = ANY (concrete))
                           AND op.oprright = ANY (concrete)
                           AND op.oprresult = ANY (concrete)
                    LOOP
                        n := n + 1;
                        fn := format('%I.look_alike_op_%s', target, n);
                        IF o.oprleft = 0 THEN
                            EXECUTE format('CREATE FUNCTION %s(%s) RETURNS %s LANGUAGE sql AS %L',
                                fn, o.oprright::regtype, o.oprresult::regtype,
                                format('SELECT CASE WHEN m.hit() IS NULL THEN NULL ELSE pg_catalog.%I($1) END', o.proname));
                            EXECUTE format('CREATE OPERATOR %I.%s (RIGHTARG = %s, FUNCTION = %s)',
                                target, o.oprname, o.oprright::regtype, fn);
                        ELSE
                            EXECUTE format('CREATE FUNCTION %s(%s, %s) RETURNS %s LANGUAGE sql AS %L',
                                fn, o.oprleft::regtype, o.oprright::regtype, o.oprresult::regtype,
                                format('SELECT CASE WHEN m.hit() IS NULL THEN NULL ELSE pg_catalog.%I($1, $2) END', o.proname));
                            EXECUTE format('CREATE OPERATOR %I.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %s)',
                                target, o.oprname, o.oprleft::regtype, o.oprright::regtype, fn);
                        END IF;
                    END LOOP;
                END IF;
                FOR f IN
                    SELECT p.proname, p.proargtypes, p.prorettype, p.pronargs
                      FROM pg_catalog.pg_proc p
                     WHERE p.pronamespace = 'pg_catalog'::regnamespace
                       AND p.prokind = 'f' AND NOT p.proretset AND p.provariadic = 0
                       AND p.proname = ANY (ARRAY[{names}]::name[])
                       AND p.prorettype = ANY (concrete)
                       AND (p.pronargs = 0 OR (p.proargtypes::oid[] <@ concrete::oid[]))
                LOOP
                    SELECT string_agg(format_type(t, NULL), ', ' ORDER BY i),
                           string_agg('$' || i, ', ' ORDER BY i)
                      INTO args, params
                      FROM unnest(f.proargtypes::oid[]) WITH ORDINALITY AS a(t, i);
                    BEGIN
                        EXECUTE format('CREATE FUNCTION %I.%I(%s) RETURNS %s LANGUAGE sql VOLATILE AS %L',
                            target, f.proname, COALESCE(args, ''), f.prorettype::regtype,
                            format('SELECT CASE WHEN m.hit() IS NULL THEN NULL ELSE pg_catalog.%I(%s) END',
                                   f.proname, COALESCE(params, '')));
                    EXCEPTION WHEN duplicate_function THEN NULL;
                    END;
                END LOOP;
            END LOOP;
        END
        $plant$;
        "#
    ))
    .unwrap_or_else(|e| panic!("plant look-alikes in {targets}: {e:?}"));
}

/// How often a look-alike ran.
fn hits(db: &mut Client) -> i64 {
    let called = one(db, "SELECT is_called FROM m.hits");
    if called == "f" {
        0
    } else {
        one(db, "SELECT last_value FROM m.hits").parse().unwrap()
    }
}

/// mallory: a login with a schema `m` of its own first in its search_path (before
/// pg_catalog), and a counter every look-alike bumps.
fn mallory(server: &Server) {
    server
        .client()
        .batch_execute(
            "CREATE ROLE mallory LOGIN; \
             CREATE SCHEMA m AUTHORIZATION mallory; \
             ALTER ROLE mallory SET search_path = m, pg_catalog, public, pg_temp",
        )
        .expect("mallory");
    let mut db = connect(server, "mallory", "postgres");
    db.batch_execute(
        "GRANT USAGE ON SCHEMA m TO PUBLIC; \
         CREATE SEQUENCE m.hits; \
         GRANT ALL ON SEQUENCE m.hits TO PUBLIC; \
         CREATE FUNCTION m.hit() RETURNS bigint LANGUAGE sql VOLATILE \
             AS 'SELECT pg_catalog.nextval(''m.hits''::pg_catalog.regclass)'",
    )
    .expect("mallory's counter");
}

/// Every public function of the SQL edition, called by `db` (whose look-alikes must never
/// run), on tenant `t`: each must answer what it answers for anybody.
fn run_everything(db: &mut Client, t: &str) {
    let q = |s: &str| s.replace("$T", t);
    let mut check = |sql: &str, expected: &str| {
        let sql = q(sql);
        let got = one(db, &sql);
        assert_eq!(got, expected, "{sql}");
    };
    check(
        "SELECT c.outcome FROM idem_claim('$T', 'k1', 'h') AS c",
        "claimed",
    );
    check(
        "SELECT c.outcome FROM idem_claim('$T', 'k1', 'other') AS c",
        "mismatch",
    );
    check(
        "SELECT c.outcome FROM idem_claim('$T', 'k1', 'h') AS c",
        "in_progress",
    );
    let f = |name: &str| fence(name);
    let out = claim_into(db, "f2", &q("idem_claim('$T', 'k2', 'h')"));
    assert_eq!(out, "claimed");
    let mut check = |sql: String, expected: &str| {
        let got = one(db, &sql);
        assert_eq!(got, expected, "{sql}");
    };
    check(
        q(&format!(
            "SELECT idem_heartbeat('$T', 'k2', {}, '1 min') IS NOT NULL",
            f("f2")
        )),
        "t",
    );
    check(
        q(&format!(
            "SELECT 'ok' FROM idem_checkpoint('$T', 'k2', {}, 'step', '{{\"a\": 1}}')",
            f("f2")
        )),
        "ok",
    );
    check(
        q(&format!(
            "SELECT 'ok' FROM idem_assert_fence('$T', 'k2', {})",
            f("f2")
        )),
        "ok",
    );
    check(
        q(&format!(
            "SELECT idem_complete('$T', 'k2', {}, 201, '{{\"ok\": true}}') IS NOT NULL",
            f("f2")
        )),
        "t",
    );
    check(
        q("SELECT c.outcome OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) c.response_code::text \
                  OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) c.response_body::text \
           FROM idem_claim('$T', 'k2', 'h') AS c"),
        "completed 201 {\"ok\": true}",
    );
    assert_eq!(
        claim_into(db, "f3", &q("idem_claim('$T', 'k3', 'h')")),
        "claimed"
    );
    let mut check = |sql: String, expected: &str| {
        let got = one(db, &sql);
        assert_eq!(got, expected, "{sql}");
    };
    check(
        q(&format!(
            "SELECT idem_fail_final('$T', 'k3', {}, 402) IS NOT NULL",
            f("f3")
        )),
        "t",
    );
    check(
        q("SELECT c.outcome FROM idem_claim('$T', 'k3', 'h') AS c"),
        "failed",
    );
    assert_eq!(
        claim_into(db, "f4", &q("idem_claim('$T', 'k4', 'h')")),
        "claimed"
    );
    let mut check = |sql: String, expected: &str| {
        let got = one(db, &sql);
        assert_eq!(got, expected, "{sql}");
    };
    check(
        q(&format!(
            "SELECT 'ok' FROM idem_release('$T', 'k4', {})",
            f("f4")
        )),
        "ok",
    );
    check(
        q("SELECT c.outcome FROM idem_claim('$T', 'k4', 'h') AS c"),
        "claimed",
    );
    check(q("SELECT idem_forget('$T', 'k4')"), "t");
    check(q("SELECT idem_forget('$T', 'k4')"), "f");
    check(q("SELECT idem_consume('$T', 'msg-1')"), "t");
    check(q("SELECT idem_consume('$T', 'msg-1')"), "f");
    check(
        q("SELECT pg_catalog.string_agg(k, ',') FROM idem_consume_many('$T', ARRAY['msg-1', 'msg-2', 'msg-2']) AS k"),
        "msg-2",
    );
    check(
        q("SELECT pg_catalog.set_config('my.fs', pg_catalog.array_agg(c.fence ORDER BY c.key)::text, false) IS NOT NULL \
           FROM idem_claim_many('$T', ARRAY['b1', 'b2'], ARRAY['h', 'h']) AS c"),
        "t",
    );
    check(
        q(
            "SELECT pg_catalog.count(*) FROM idem_complete_many('$T', ARRAY['b1', 'b2'], \
           pg_catalog.current_setting('my.fs')::bigint[], ARRAY[200, 201])",
        ),
        "2",
    );
    check(
        q("SELECT c.outcome FROM idem_claim_seq('$T', 's', 5) AS c"),
        "new",
    );
    check(
        q("SELECT c.outcome FROM idem_claim_seq('$T', 's', 3) AS c"),
        "duplicate",
    );
    check(q("SELECT idem_watermark('$T', 's')"), "5");
    check(q("SELECT idem_reset_watermark('$T', 's', 1)"), "5");
    // expiry and the purge
    check(
        q(
            "SELECT pg_catalog.set_config('my.f5', c.fence::text, false) IS NOT NULL \
           FROM idem_claim('$T', 'k5', 'h', '1 millisecond', '1 millisecond') AS c",
        ),
        "t",
    );
    check(
        q(&format!(
            "SELECT idem_complete('$T', 'k5', {}, 200) IS NOT NULL",
            f("f5")
        )),
        "t",
    );
    std::thread::sleep(Duration::from_millis(20));
    check(
        "SELECT idem_purge() > 0".replace('>', "OPERATOR(pg_catalog.>)"),
        "t",
    );
    // fingerprints and keys (values checked against the native edition in sql_edition_hashing)
    check(
        "SELECT pg_catalog.length(idem_request_hash('{\"b\": [1.50, 2E2], \"a\": \"x\"}'))".into(),
        "64",
    );
    check(
        "SELECT idem_request_hash('post', '/v1/charges', NULL) IS NOT NULL".into(),
        "t",
    );
    check(
        q("SELECT idem_downstream_key('$T', 'k1', 'charge') IS NOT NULL"),
        "t",
    );
    check("SELECT idem_new_key() IS NOT NULL".into(), "t");
}

/// Session settings a role may change for itself that change how SQL is parsed, planned or
/// printed: pg_idem's functions must answer alike under each.
const HOSTILE_SETTINGS: &[&str] = &[
    "SET transform_null_equals = on; \
     SET IntervalStyle = sql_standard; SET DateStyle = 'SQL, DMY'; \
     SET TimeZone = 'Pacific/Kiritimati'; SET extra_float_digits = 3; SET bytea_output = escape; \
     SET array_nulls = off; SET enable_indexscan = off; SET enable_bitmapscan = off; \
     SET enable_indexonlyscan = off; SET default_transaction_isolation = 'serializable'",
    "SET TimeZone = 'Etc/GMT+12'; \
     SET IntervalStyle = iso_8601; SET enable_seqscan = off; SET jit = on; \
     SET jit_above_cost = 0; SET plan_cache_mode = force_generic_plan",
];

/// A role with its own schema first in its search_path, look-alikes of every operator and
/// function pg_idem's SQL uses there and in pg_temp (types, tables and views named like
/// pg_idem's too), and hostile session settings, calls every function with tenant grants on:
/// each answers as for anybody, and no look-alike ever runs (with the role's rights or the
/// owner's).
#[test]
fn look_alikes_and_session_settings_change_nothing() {
    let server = plain_server(&[]);
    mallory(&server);
    tenant_grants_on(&server);
    let mut m = connect(&server, "mallory", "postgres");
    plant_look_alikes(&mut m, &["m"]);
    m.batch_execute(
        "CREATE TYPE m.key_row AS (fence text); CREATE TYPE m.claim_answer AS (outcome int); \
         CREATE TYPE m.owner_settings AS (tenant_grants text); \
         CREATE TYPE m.idem_claim_result AS (outcome int); \
         CREATE TABLE m.keys (tenant text, key text); CREATE TABLE m.watermarks (tenant text); \
         CREATE TABLE m.settings (name text, value text); \
         INSERT INTO m.settings VALUES ('pg_idem.tenant_grants', 'off'); \
         CREATE TABLE m.tenant_grants (role oid, tenant text); CREATE SEQUENCE m.fence_seq; \
         CREATE VIEW m.pg_locks AS SELECT * FROM pg_catalog.pg_locks; \
         CREATE VIEW m.pg_roles AS SELECT * FROM pg_catalog.pg_roles",
    )
    .expect("look-alike types and tables");
    // sanity: the look-alikes do win for mallory's own SQL
    let before = hits(&mut m);
    one(&mut m, "SELECT 'a'::text = 'a'::text");
    assert!(
        hits(&mut m) > before,
        "the look-alike operators are not used"
    );
    for (i, settings) in HOSTILE_SETTINGS.iter().enumerate() {
        let tenant = format!("mt{i}");
        grant(&server, "mallory", &tenant);
        let mut session = connect(&server, "mallory", "postgres");
        // pg_temp's look-alikes and relations are the session's own
        plant_look_alikes(&mut session, &["pg_temp"]);
        session
            .batch_execute(
                "CREATE TEMP TABLE keys (tenant text, key text); \
                 CREATE TEMP TABLE settings (name text, value text); \
                 INSERT INTO settings VALUES ('pg_idem.tenant_grants', 'off'); \
                 CREATE TEMP TABLE tenant_grants (role oid, tenant text); \
                 CREATE TEMP VIEW pg_locks AS SELECT * FROM pg_catalog.pg_locks; \
                 CREATE TYPE pg_temp.key_row AS (fence text); \
                 CREATE DOMAIN pg_temp.text AS pg_catalog.varchar(1)",
            )
            .expect("pg_temp look-alikes");
        session.batch_execute(settings).expect("hostile settings");
        let before = hits(&mut session);
        run_everything(&mut session, &tenant);
        assert_eq!(
            hits(&mut session),
            before,
            "a look-alike ran inside pg_idem (settings: {settings})"
        );
        // and the boundary held: another tenant is refused
        assert_eq!(
            fails(&mut session, "SELECT * FROM idem_claim('bank', 'k', 'h')"),
            "42501"
        );
    }
    assert_no_crash(&server);
}

/// The plain install run by an owner whose own search_path puts a hostile schema (and then
/// public, which PUBLIC may write to, as in a database created before PostgreSQL 15) before
/// pg_catalog: nothing of the install or of any call later resolves to the planted objects.
#[test]
fn the_plain_install_ignores_a_hostile_search_path() {
    let server = Server::start_bare(&[]);
    app_roles(&server);
    mallory(&server);
    server
        .client()
        .batch_execute(&format!(
            "GRANT CREATE ON SCHEMA public TO PUBLIC; \
             ALTER ROLE {ADMIN} SET search_path = m, public, pg_catalog; \
             ALTER ROLE {USER} SET search_path = m, public, pg_catalog"
        ))
        .unwrap();
    let mut m = connect(&server, "mallory", "postgres");
    plant_look_alikes(&mut m, &["m"]);
    // and in public: PUBLIC may create there
    plant_look_alikes(&mut m, &["public"]);
    let before = hits(&mut m);
    install(&server, "postgres");
    assert_eq!(hits(&mut m), before, "the install ran a look-alike");
    // the owner, with its hostile search_path, uses the owner-only functions
    let mut admin = connect(&server, ADMIN, "postgres");
    assert_eq!(
        one(&mut admin, "SELECT idem_grant_tenant('app_user', 'ut')"),
        "t"
    );
    assert_eq!(
        one(
            &mut admin,
            "SELECT pg_catalog.count(*) FROM idem_tenant_grants()"
        ),
        "1"
    );
    tenant_grants_on(&server);
    let mut user = connect(&server, USER, "postgres");
    run_everything(&mut user, "ut");
    assert_eq!(hits(&mut m), before, "a call ran a look-alike");
    // every SECURITY DEFINER function pins its search_path; none of pg_idem's internals is
    // callable by PUBLIC
    let mut su = server.client();
    let unpinned = one(
        &mut su,
        "SELECT pg_catalog.string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p \
         WHERE p.prosecdef AND p.proowner = 'app_admin'::regrole \
           AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)",
    );
    assert_eq!(
        unpinned, "",
        "SECURITY DEFINER functions without a pinned search_path"
    );
    let callable = one(
        &mut su,
        "SELECT pg_catalog.string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p \
         WHERE p.pronamespace = 'idem'::regnamespace \
           AND has_function_privilege('app_user', p.oid, 'EXECUTE')",
    );
    assert_eq!(callable, "", "internals app_user may execute");
    assert_no_crash(&server);
}

/// A session may turn standard_conforming_strings off; PL/pgSQL parses pg_idem's bodies in
/// the session that calls them, with its settings, so no literal in them may hold a
/// backslash (hashing.sql's rule). Two do: the pattern '^\s*[0-9]+\s*$' of
/// idem.session_duration_us becomes '^s*[0-9]+s*$' (a lease_timeout of ' 500 ' is read as an
/// interval: 500 seconds instead of 500 ms), and (in the working tree's rewrite of idem.claim)
/// the bytea literal '\xe3b0...' becomes invalid UTF-8: every idem_claim fails with 22021.
#[test]
fn session_settings_mean_the_same_whatever_the_string_syntax() {
    let server = plain_server(&[]);
    let mut db = connect(&server, USER, "postgres");
    db.batch_execute("SET standard_conforming_strings = off; SET escape_string_warning = off")
        .unwrap();
    run_everything(&mut db, "scs-off");
    for settings in [
        "SET pg_idem.lease_timeout = ' 500 '",
        "SET standard_conforming_strings = off; SET escape_string_warning = off; \
         SET pg_idem.lease_timeout = ' 500 '",
    ] {
        let mut db = connect(&server, USER, "postgres");
        db.batch_execute(settings).unwrap();
        let lease = one(
            &mut db,
            "SELECT EXTRACT(epoch FROM c.lease_expires_at - pg_catalog.clock_timestamp()) < 1 \
             FROM idem_claim('t', pg_catalog.gen_random_uuid()::text, 'h') AS c",
        );
        assert_eq!(lease, "t", "a lease of 500 ms under {settings}");
    }
    assert_no_crash(&server);
}
