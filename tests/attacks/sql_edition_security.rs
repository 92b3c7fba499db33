//! The SQL edition attacked: as a hostile role (look-alike objects on every search path it
//! controls, hostile session settings, direct access to pg_idem's state, other tenants' keys,
//! table-owner code run by someone else's maintenance, advisory locks, every argument it may
//! pass) and as a DBA (columns, indexes, triggers, rules, row level security, VACUUM FULL,
//! REINDEX, CLUSTER on idem.keys), and in read-only, parallel and prepared transactions.
//!
//! Every server here runs the SQL edition's plain install as `Target::plain()` in
//! tests/sql_edition.rs does it (no library preloaded; `app_admin`, not a superuser, owns
//! pg_idem); a few start a native server next to it to compare with what the native edition
//! answers. Where the SQL edition differs on purpose (docs/editions.md), the test pins the
//! difference as documented.

use std::time::{Duration, Instant};

use pg_idem_tests::{amcheck, major, wait_for, Client, NoTls, Server};

// ---------------------------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------------------------

/// pg_idem's owner: the database's owner, CREATEROLE, not a superuser (RDS's master user).
const ADMIN: &str = pg_idem_tests::managed::ADMIN;
/// An application's login with no attribute.
const USER: &str = pg_idem_tests::managed::USER;

/// The SQL edition's plain install (the harness builds it from this tree, or from the tree
/// `PG_IDEM_SQL_EDITION_SOURCE` names: a copy with a fix being tried).
fn edition() -> &'static str {
    &pg_idem_tests::sql_edition().plain
}

/// A connection as `role` to database `db`, statements bounded to a minute.
fn connect(server: &Server, role: &str, db: &str) -> Client {
    connect_with(server, role, db, "60s")
}

fn connect_with(server: &Server, role: &str, db: &str, statement_timeout: &str) -> Client {
    connect_to_port(server.port, role, db, statement_timeout)
}

/// connect_with by the server's port, for a thread of its own.
fn connect_to_port(port: u16, role: &str, db: &str, statement_timeout: &str) -> Client {
    let conninfo = format!(
        "host=127.0.0.1 port={port} user={role} dbname={db} connect_timeout=10 \
         options='-c statement_timeout={statement_timeout}'"
    );
    Client::connect(&conninfo, NoTls).unwrap_or_else(|e| panic!("connect as {role} to {db}: {e}"))
}

/// The roles of tests/sql_edition.rs: app_admin owns database postgres and schema public.
fn roles(server: &Server) {
    server
        .client()
        .batch_execute(&format!(
            "CREATE ROLE {ADMIN} LOGIN CREATEROLE; CREATE ROLE {USER} LOGIN;
             ALTER DATABASE postgres OWNER TO {ADMIN};
             ALTER SCHEMA public OWNER TO {ADMIN};"
        ))
        .expect("roles");
}

/// The plain install, by app_admin, in one transaction, in database `db`.
fn install(server: &Server, db: &str) {
    connect(server, ADMIN, db)
        .batch_execute(&format!("BEGIN;\n{}\nCOMMIT;", edition()))
        .unwrap_or_else(|e| panic!("plain install of the SQL edition into {db}: {e:?}"));
}

/// A server with no pg_idem library, and the SQL edition installed in database postgres.
fn plain(conf: &[&str]) -> Server {
    let server = Server::start_bare(conf);
    roles(&server);
    install(&server, "postgres");
    server
}

/// A server with pg_idem's library preloaded and CREATE EXTENSION pg_idem (owned by the
/// superuser, as natively), with the same roles: what the native edition answers.
fn native(conf: &[&str]) -> Server {
    let server = Server::start_bare(
        &[
            &[
                "shared_preload_libraries = 'pg_idem'",
                "pg_idem.purge_interval = 0",
            ],
            conf,
        ]
        .concat(),
    );
    server
        .client()
        .batch_execute("CREATE EXTENSION pg_idem")
        .expect("CREATE EXTENSION pg_idem");
    roles(&server);
    server
}

/// An owner-only setting: in the SQL edition a row of idem.settings (a missing row is the
/// default).
fn owner_setting(server: &Server, db: &str, name: &str, value: &str) {
    connect(server, ADMIN, db)
        .batch_execute(&format!(
            "INSERT INTO idem.settings (name, value) VALUES ('{name}', '{value}') \
             ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value"
        ))
        .unwrap_or_else(|e| panic!("{name} = {value}: {e:?}"));
}

/// pg_idem.tenant_grants on.
fn tenant_grants_on(server: &Server) {
    owner_setting(server, "postgres", "pg_idem.tenant_grants", "on");
}

fn grant(server: &Server, role: &str, tenant: &str) {
    connect(server, ADMIN, "postgres")
        .batch_execute(&format!("SELECT idem_grant_tenant('{role}', '{tenant}')"))
        .expect("idem_grant_tenant");
}

/// No backend crashed, nothing PANICked, no assertion failed: what the server log says.
fn assert_no_crash(server: &Server) {
    let log = server.log();
    for sign in [
        "PANIC",
        "was terminated by signal",
        "terminating any other active server processes",
        "TRAP:",
        "server process (PID",
    ] {
        assert!(
            !log.contains(sign),
            "the server log shows a crash ({sign}):\n{log}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Statements and their answers
// ---------------------------------------------------------------------------------------------

type Rows = Vec<Vec<Option<String>>>;

/// What a statement gave: its rows as text, or its error.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Rows(Rows),
    Error { code: String, message: String },
}

impl Answer {
    fn code(&self) -> Option<&str> {
        match self {
            Answer::Rows(_) => None,
            Answer::Error { code, .. } => Some(code),
        }
    }

    /// The first column of the first row ("" for none).
    fn first(&self) -> String {
        match self {
            Answer::Rows(rows) => rows
                .first()
                .and_then(|r| r.first().cloned().flatten())
                .unwrap_or_default(),
            Answer::Error { code, message } => format!("ERROR {code}: {message}"),
        }
    }
}

/// Runs `sql` (simple protocol: several statements allowed).
fn ask(db: &mut Client, sql: &str) -> Answer {
    match db.simple_query(sql) {
        Ok(messages) => Answer::Rows(
            messages
                .iter()
                .filter_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_string))
                            .collect(),
                    ),
                    _ => None,
                })
                .collect(),
        ),
        Err(e) => {
            // the error reaches the client before the server has rolled back and let its
            // locks go: a round trip waits for that
            let _ = db.simple_query("");
            match e.as_db_error() {
                Some(db_error) => Answer::Error {
                    code: db_error.code().code().to_string(),
                    message: db_error.message().to_string(),
                },
                None => Answer::Error {
                    code: "client".into(),
                    message: e.to_string(),
                },
            }
        }
    }
}

/// The first column of the first row; panics on an error.
fn one(db: &mut Client, sql: &str) -> String {
    match ask(db, sql) {
        Answer::Error { code, message } => panic!("{sql}: {code} {message}"),
        answer => answer.first(),
    }
}

/// The SQLSTATE `sql` fails with; panics when it succeeds.
fn fails(db: &mut Client, sql: &str) -> String {
    match ask(db, sql) {
        Answer::Rows(rows) => panic!("{sql} succeeded: {rows:?}"),
        Answer::Error { code, .. } => code,
    }
}

/// A claim whose fence is kept in the session variable `my.<name>`: its outcome.
fn claim_into(db: &mut Client, name: &str, call: &str) -> String {
    one(
        db,
        &format!(
            "SELECT c.outcome FROM {call} AS c \
             WHERE pg_catalog.set_config('my.{name}', COALESCE(c.fence::text, '0'), false) IS NOT NULL"
        ),
    )
}

/// The fence kept by `claim_into`, as SQL.
fn fence(name: &str) -> String {
    format!("pg_catalog.current_setting('my.{name}')::bigint")
}

// ---------------------------------------------------------------------------------------------
// Look-alikes: search_path and session settings
// ---------------------------------------------------------------------------------------------

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
    let server = plain(&[]);
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
    roles(&server);
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

// ---------------------------------------------------------------------------------------------
// Direct access and owner-only settings
// ---------------------------------------------------------------------------------------------

/// An application role cannot read or write pg_idem's tables, call its internals, take fences
/// or grant itself tenants; setting pg_idem.* placeholders changes no boundary or limit.
#[test]
fn app_roles_cannot_touch_the_state_or_the_owner_settings() {
    let server = plain(&[]);
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

// ---------------------------------------------------------------------------------------------
// Tenants as an access boundary
// ---------------------------------------------------------------------------------------------

/// Every function that takes a tenant, called on tenant `$T` (and key 'k', fence 1): as in
/// tests/tenant_grants.rs.
const TENANT_CALLS: &[&str] = &[
    "SELECT * FROM idem_claim('$T', 'k', 'h')",
    "SELECT * FROM idem_claim_many('$T', ARRAY['k'], ARRAY['h'])",
    "SELECT idem_complete('$T', 'k', 1, 200)",
    "SELECT idem_fail_final('$T', 'k', 1, 500)",
    "SELECT idem_release('$T', 'k', 1)",
    "SELECT idem_heartbeat('$T', 'k', 1)",
    "SELECT idem_forget('$T', 'k')",
    "SELECT idem_checkpoint('$T', 'k', 1, 'p')",
    "SELECT idem_assert_fence('$T', 'k', 1)",
    "SELECT * FROM idem_claim_seq('$T', 's', 1)",
    "SELECT idem_watermark('$T', 's')",
    "SELECT idem_reset_watermark('$T', 's', 0)",
    "SELECT idem_consume('$T', 'm')",
    "SELECT * FROM idem_consume_many('$T', ARRAY['m'])",
    "SELECT * FROM idem_complete_many('$T', ARRAY['k'], ARRAY[1::bigint], ARRAY[200])",
];

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
    let server = plain(&[]);
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
    let server = plain(&[]);
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
    let server = plain(&[]);
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
    let server = plain(&[]);
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

// ---------------------------------------------------------------------------------------------
// Maintenance running a table owner's code (security-restricted operations)
// ---------------------------------------------------------------------------------------------

/// bank_app may act on tenant 'bank' (whose order is paid and completed); mallory on none,
/// but owns a table whose expression index calls pg_idem once armed: it forgets bank's order
/// and consumes bank's message, and counts in sequences whether pg_idem let it (a function
/// declared IMMUTABLE may not INSERT), as in tests/tenant_boundary.rs.
fn bank_and_mallorys_trap(server: &Server) {
    server
        .client()
        .batch_execute(
            "CREATE ROLE bank_app LOGIN; CREATE ROLE mallory LOGIN; \
             CREATE SCHEMA mallory_s AUTHORIZATION mallory",
        )
        .unwrap();
    grant(server, "bank_app", "bank");
    tenant_grants_on(server);
    let mut mallory = connect(server, "mallory", "postgres");
    mallory
        .batch_execute(
            "GRANT USAGE ON SCHEMA mallory_s TO PUBLIC; \
             CREATE TABLE mallory_s.armed (on_ boolean); \
             CREATE SEQUENCE mallory_s.stole; CREATE SEQUENCE mallory_s.denied; \
             CREATE SEQUENCE mallory_s.purged; \
             CREATE FUNCTION mallory_s.steal(x int) RETURNS int IMMUTABLE LANGUAGE plpgsql AS $$ \
             DECLARE n bigint; \
             BEGIN \
               IF EXISTS (SELECT 1 FROM mallory_s.armed) THEN \
                 BEGIN \
                   PERFORM public.idem_forget('bank', 'paid-order'); \
                   PERFORM public.idem_consume('bank', 'message-1'); \
                   PERFORM pg_catalog.nextval('mallory_s.stole'); \
                 EXCEPTION WHEN insufficient_privilege THEN \
                   PERFORM pg_catalog.nextval('mallory_s.denied'); \
                 END; \
                 BEGIN \
                   n := public.idem_purge(); \
                   IF n > 0 THEN PERFORM pg_catalog.setval('mallory_s.purged', n); END IF; \
                 EXCEPTION WHEN insufficient_privilege THEN NULL; \
                 END; \
               END IF; \
               RETURN x; \
             END $$; \
             CREATE TABLE mallory_s.bait (x int); \
             INSERT INTO mallory_s.bait SELECT g FROM generate_series(1, 100) g; \
             CREATE INDEX bait_steal ON mallory_s.bait (mallory_s.steal(x)); \
             CREATE INDEX bait_plain ON mallory_s.bait (x); \
             CREATE MATERIALIZED VIEW mallory_s.mv AS SELECT mallory_s.steal(x) AS y FROM mallory_s.bait",
        )
        .unwrap();
}

/// bank's order paid and completed, its message not consumed, and an expired key of bank's;
/// mallory's counters reset and its trap armed.
fn arm(server: &Server) {
    let mut admin = connect(server, ADMIN, "postgres");
    admin
        .batch_execute("DELETE FROM idem.keys WHERE tenant = 'bank'")
        .unwrap();
    let mut bank = connect(server, "bank_app", "postgres");
    assert_eq!(
        claim_into(&mut bank, "f", "idem_claim('bank', 'paid-order', 'h')"),
        "claimed"
    );
    one(
        &mut bank,
        &format!(
            "SELECT idem_complete('bank', 'paid-order', {}, 200, '{{\"charged\": 100}}')",
            fence("f")
        ),
    );
    assert_eq!(
        claim_into(
            &mut bank,
            "e",
            "idem_claim('bank', 'expired', 'h', '1 millisecond', '1 millisecond')"
        ),
        "claimed"
    );
    one(
        &mut bank,
        &format!(
            "SELECT idem_complete('bank', 'expired', {}, 200)",
            fence("e")
        ),
    );
    std::thread::sleep(Duration::from_millis(20));
    let mut mallory = connect(server, "mallory", "postgres");
    mallory
        .batch_execute(
            "ALTER SEQUENCE mallory_s.stole RESTART; ALTER SEQUENCE mallory_s.denied RESTART; \
             ALTER SEQUENCE mallory_s.purged RESTART; \
             DELETE FROM mallory_s.armed; INSERT INTO mallory_s.armed VALUES (true)",
        )
        .unwrap();
}

/// What the trap did: "stole", "denied" (both or neither), "purged bank's expired key".
fn trap_log(server: &Server) -> Vec<String> {
    let mut mallory = connect(server, "mallory", "postgres");
    let mut log: Vec<String> = ["denied", "stole"]
        .into_iter()
        .filter(|what| {
            one(
                &mut mallory,
                &format!("SELECT is_called FROM mallory_s.{what}"),
            ) == "t"
        })
        .map(str::to_string)
        .collect();
    let mut admin = connect(server, ADMIN, "postgres");
    let bank = one(
        &mut admin,
        "SELECT string_agg(key, ',' ORDER BY key) FROM idem.keys WHERE tenant = 'bank'",
    );
    if !bank.contains("paid-order") {
        log.push("forgot bank's paid order".into());
    }
    if bank.contains("message-1") {
        log.push("consumed bank's message".into());
    }
    if !bank.contains("expired") {
        log.push("purged bank's expired key".into());
    }
    log
}

/// A superuser's maintenance of mallory's table (ANALYZE, VACUUM FULL, REINDEX, CLUSTER,
/// CREATE INDEX, REFRESH MATERIALIZED VIEW) runs mallory's index expression as mallory inside
/// a security-restricted operation: natively mallory's grants decide there (it has none). The
/// SQL edition cannot learn that role and refuses every tenant there: the superuser's own
/// rights must never be lent.
///
/// Fails: idem.check_access returns for a superuser session before it probes for a
/// security-restricted operation, and idem.purgeable_tenants never probes.
#[test]
fn a_superusers_maintenance_lends_no_tenant_to_the_table_owners_code() {
    let server = plain(&[]);
    bank_and_mallorys_trap(&server);
    let mut failures = Vec::new();
    for (i, maintenance) in [
        "ANALYZE mallory_s.bait",
        "VACUUM FULL mallory_s.bait",
        "REINDEX TABLE mallory_s.bait",
        "CLUSTER mallory_s.bait USING bait_plain",
        "CREATE INDEX ON mallory_s.bait (mallory_s.steal(x + $I))",
        "REFRESH MATERIALIZED VIEW mallory_s.mv",
    ]
    .into_iter()
    .enumerate()
    {
        arm(&server);
        let maintenance = maintenance.replace("$I", &i.to_string());
        server.client().batch_execute(&maintenance).unwrap();
        let log = trap_log(&server);
        if log != ["denied"] {
            failures.push(format!("{maintenance}: {log:?}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert_no_crash(&server);
}

/// The same maintenance started by the database's owner (pg_idem's owner here, no superuser):
/// refused, as natively.
#[test]
fn the_database_owners_maintenance_lends_no_tenant() {
    let server = plain(&[]);
    bank_and_mallorys_trap(&server);
    if major() >= 17 {
        // since 17 the database's owner maintains others' tables through pg_maintain
        server
            .client()
            .batch_execute(&format!("GRANT pg_maintain TO {ADMIN}"))
            .unwrap();
    }
    for maintenance in ["ANALYZE", "ANALYZE mallory_s.bait"] {
        arm(&server);
        connect(&server, ADMIN, "postgres")
            .batch_execute(maintenance)
            .unwrap();
        assert_eq!(trap_log(&server), ["denied"], "{maintenance}");
    }
    assert_no_crash(&server);
}

/// Autovacuum's ANALYZE runs mallory's index expression as mallory in a security-restricted
/// operation, in a session whose user is the bootstrap superuser: mallory triggers it on its
/// own table, with no superuser involved.
#[test]
fn autovacuum_lends_no_tenant_to_the_table_owners_code() {
    let server = plain(&["autovacuum_naptime = 1"]);
    bank_and_mallorys_trap(&server);
    arm(&server);
    let mut mallory = connect(&server, "mallory", "postgres");
    mallory
        .batch_execute(
            "ALTER TABLE mallory_s.bait SET (autovacuum_analyze_threshold = 1, \
                                             autovacuum_analyze_scale_factor = 0); \
             INSERT INTO mallory_s.bait SELECT g FROM generate_series(1, 100) g",
        )
        .unwrap();
    let mut db = server.client();
    wait_for(
        "autovacuum to analyze mallory's table",
        Duration::from_secs(90),
        || {
            one(
                &mut db,
                "SELECT last_autoanalyze IS NOT NULL FROM pg_stat_user_tables \
                 WHERE relid = 'mallory_s.bait'::regclass",
            ) == "t"
        },
    );
    assert_eq!(trap_log(&server), ["denied"]);
    assert_no_crash(&server);
}

// ---------------------------------------------------------------------------------------------
// Locks another tenant's role can take
// ---------------------------------------------------------------------------------------------

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
    let server = plain(&[]);
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
    let server = plain(&[]);
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
    let server = plain(&[]);
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

/// A purge left open by a role holds no other tenant's keys (tests/tenant_boundary.rs): with
/// tenant grants on, neither idem_purge() nor the purge the SQL edition's calls do in passing
/// may lock keys of tenants the caller has no grant on.
#[test]
fn an_open_transaction_holds_no_other_tenants_keys() {
    let server = plain(&[]);
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

// ---------------------------------------------------------------------------------------------
// Transactions: read-only, parallel, prepared
// ---------------------------------------------------------------------------------------------

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
    let sql_edition = plain(&[]);
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
/// tests/tenant_grants.rs, the_tenant_check_answers_in_a_parallel_query.)
#[test]
fn idem_watermark_answers_in_a_parallel_query() {
    let server = plain(&[]);
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
    let server = plain(&[]);
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
    let server = plain(&["max_prepared_transactions = 4"]);
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
    let server = plain(&["max_prepared_transactions = 4"]);
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

// ---------------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------------

/// Values a role may pass for each argument type: NULL, the extremes, the odd.
fn values_of(type_name: &str) -> Vec<String> {
    let v = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut values = match type_name {
        "text" => v(&[
            "''",
            "'t'",
            "' '",
            "pg_catalog.repeat('x', 255)",
            "pg_catalog.repeat('x', 256)",
            "pg_catalog.repeat('é', 255)",
            "pg_catalog.repeat('🦀', 255)",
            "pg_catalog.repeat('x', 10000000)",
            "E'a\\\\b\\n\\t\"'",
            "'%s %I %L ''; SELECT 1; --'",
            "'urn:uuid:01890000-0000-7000-8000-000000000000'",
            "'01890000-0000-7000-8000-000000000000'",
            "'{00000000-0000-7000-8000-000000000000}'",
            "'ffffffffffff7fff8fffffffffffffff'",
        ]),
        "bigint" => v(&[
            "0",
            "-1",
            "(-9223372036854775807 - 1)",
            "9223372036854775807",
        ]),
        "integer" => v(&["0", "-1", "(-2147483647 - 1)", "2147483647"]),
        "interval" => v(&[
            "'1 mon'",
            "'-1 day +25 hours'",
            "'1 mon -31 days'",
            "'0'",
            "'1 microsecond'",
            "'0.4 microseconds'",
            "'36000 days'",
            "'36000 days 00:00:00.000001'",
            "'100 years'",
            "'178000000 years'",
            "'-178000000 years'",
            "'2147483647 days 2147483647 months'",
            "'-2147483648 days'",
        ]),
        "jsonb" => v(&[
            "'null'",
            "'{}'",
            "'[]'",
            "'\"\"'",
            "'1e131071'",
            "'-0.000000000000000000000000000001'",
            "'{\"a\": {\"b\": [1, 2, {\"c\": null}]}}'",
            "(pg_catalog.repeat('[', 400) || pg_catalog.repeat(']', 400))::jsonb",
            "pg_catalog.jsonb_build_object('x', pg_catalog.repeat('a', 2000000))",
            "pg_catalog.to_jsonb('NaN'::numeric)",
            "pg_catalog.to_jsonb('Infinity'::float8)",
        ]),
        "text[]" => v(&[
            "'{}'::text[]",
            "ARRAY[NULL]::text[]",
            "ARRAY['a', 'a']",
            "ARRAY['']",
            "'[0:1]={a,b}'::text[]",
            "ARRAY[['a', 'b'], ['c', 'd']]",
            "pg_catalog.array_fill('x'::text, ARRAY[1001])",
            "(SELECT pg_catalog.array_agg(g::text) FROM pg_catalog.generate_series(1, 100000) AS g)",
        ]),
        "bigint[]" => v(&[
            "'{}'::bigint[]",
            "ARRAY[NULL]::bigint[]",
            "'[5:5]={1}'::bigint[]",
            "ARRAY[[1, 2], [3, 4]]::bigint[]",
            "ARRAY[9223372036854775807]",
        ]),
        "integer[]" => v(&[
            "'{}'::integer[]",
            "ARRAY[NULL]::integer[]",
            "'[0:0]={200}'::integer[]",
            "ARRAY[2147483647]",
        ]),
        "jsonb[]" => v(&[
            "'{}'::jsonb[]",
            "ARRAY[NULL]::jsonb[]",
            "ARRAY[pg_catalog.jsonb_build_object('x', pg_catalog.repeat('a', 2000000))]",
        ]),
        "regrole" => v(&["'app_user'::regrole", "0::oid::regrole", "'pg_monitor'::regrole"]),
        other => panic!("no values for argument type {other}"),
    };
    values.push(format!("NULL::{type_name}"));
    values
}

/// A valid value of each type, for the arguments not varied.
fn base_value(type_name: &str) -> String {
    match type_name {
        "text" => "'t'",
        "bigint" => "1",
        "integer" => "200",
        "interval" => "'1 hour'",
        "jsonb" => "'{\"ok\": true}'",
        "text[]" => "ARRAY['a', 'b']",
        "bigint[]" => "ARRAY[1, 2]::bigint[]",
        "integer[]" => "ARRAY[200, 201]",
        "jsonb[]" => "ARRAY['{}'::jsonb, 'null']",
        "regrole" => "'app_user'::regrole",
        other => panic!("no base value for argument type {other}"),
    }
    .to_string()
}

/// Every public function of pg_idem, called by an application role and by the owner with
/// every argument in turn set to each odd value (the others valid), each in its own
/// transaction: nothing ends in an internal error (XX000) or a crash, nothing runs into the
/// statement timeout.
#[test]
fn no_argument_ends_in_an_internal_error_or_a_crash() {
    let server = plain(&[]);
    grant(&server, USER, "t");
    let mut admin = connect(&server, ADMIN, "postgres");
    let functions: Vec<(String, Vec<String>)> = admin
        .query(
            "SELECT p.proname::text, \
                    COALESCE((SELECT pg_catalog.array_agg(pg_catalog.format_type(t, NULL) ORDER BY i) \
                              FROM pg_catalog.unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, i)), '{}') \
             FROM pg_catalog.pg_proc p \
             WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem\\_%' \
             ORDER BY 1, 2",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(functions.len() >= 25, "{functions:?}");
    let mut failures = Vec::new();
    let mut calls = 0;
    for grants in [false, true] {
        if grants {
            tenant_grants_on(&server);
        }
        for role in [USER, ADMIN] {
            let mut db = connect_with(&server, role, "postgres", "30s");
            for (name, types) in &functions {
                if name == "idem_distribute" {
                    continue; // needs Citus: refused with 0A000 whatever the arguments
                }
                let mut variants: Vec<Vec<String>> =
                    vec![types.iter().map(|t| base_value(t)).collect()];
                for (i, t) in types.iter().enumerate() {
                    for value in values_of(t) {
                        let mut args: Vec<String> = types.iter().map(|t| base_value(t)).collect();
                        args[i] = value;
                        variants.push(args);
                    }
                }
                for args in variants {
                    let sql = format!("SELECT * FROM public.{name}({})", args.join(", "));
                    db.batch_execute("BEGIN").unwrap();
                    let answer = ask(&mut db, &sql);
                    calls += 1;
                    if let Answer::Error { code, message } = &answer {
                        if code == "XX000" || code == "57014" || code == "client" {
                            failures.push(format!(
                                "{role} (tenant grants {grants}): {}: {code} {message}",
                                if sql.len() > 300 { &sql[..300] } else { &sql }
                            ));
                        }
                    }
                    if db.is_closed() {
                        db = connect_with(&server, role, "postgres", "30s");
                    } else {
                        let _ = ask(&mut db, "ROLLBACK");
                    }
                }
            }
        }
    }
    assert!(calls > 1000, "only {calls} calls");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_no_crash(&server);
}

/// Arrays with lower bounds other than 1, or with two dimensions, are ordinary arrays to
/// PostgreSQL, and the native edition takes their elements in order; the SQL edition indexes
/// them from 1 and reads NULL past the bounds: 22004 "keys[1] must not be null".
#[test]
fn batches_take_any_array_as_the_native_edition_does() {
    let server = plain(&[]);
    let mut db = connect(&server, USER, "postgres");
    for (sql, expected) in [
        (
            "SELECT pg_catalog.string_agg(k, ',') FROM idem_consume_many('t', '[0:1]={a,b}'::text[]) AS k",
            "a,b",
        ),
        (
            "SELECT pg_catalog.string_agg(k, ',') FROM idem_consume_many('t', ARRAY[['c', 'd'], ['e', 'f']]) AS k",
            "c,d,e,f",
        ),
        (
            "SELECT pg_catalog.string_agg(c.outcome, ',') FROM idem_claim_many('t', '[0:1]={k1,k2}'::text[], ARRAY['h', 'h']) AS c",
            "claimed,claimed",
        ),
    ] {
        assert_eq!(ask(&mut db, sql).first(), expected, "{sql}");
    }
    assert_no_crash(&server);
}

/// A request body nested a thousand levels deep (valid JSON, which jsonb stores) hashes
/// natively (its walk is iterative up to the stack limit, about 3,500 levels on a default
/// max_stack_depth); the SQL edition's idem.canonical_json recurses through PL/pgSQL, a few kB
/// of stack per level, and stops at about 600 with 54001, PostgreSQL's own error for a stack
/// too deep (docs/editions.md, "request fingerprints"). Both sides of that documented
/// difference: as deep as a request body gets, it hashes; deeper, a clean 54001.
#[test]
fn a_body_nested_past_600_levels_gets_54001_not_a_crash() {
    let server = plain(&[]);
    let mut db = connect(&server, USER, "postgres");
    let hash_of_depth = |depth: usize| {
        format!(
            "SELECT pg_catalog.length(idem_request_hash((pg_catalog.repeat('[', {depth}) \
             || pg_catalog.repeat(']', {depth}))::jsonb))"
        )
    };
    for depth in [100, 400] {
        assert_eq!(
            ask(&mut db, &hash_of_depth(depth)).first(),
            "64",
            "depth {depth}"
        );
    }
    for depth in [1000, 2000] {
        assert_eq!(
            ask(&mut db, &hash_of_depth(depth)).code(),
            Some("54001"),
            "depth {depth}"
        );
    }
    assert_eq!(
        ask(&mut db, &hash_of_depth(10)).first(),
        "64",
        "after the errors"
    );
    assert_no_crash(&server);
}

/// PostgreSQL 17 has infinite intervals. A lease or ttl of 'infinity' must be refused with
/// 22023 as natively (a lease longer than 100 years); the SQL edition reads EXTRACT(month FROM
/// 'infinity') as NULL, so idem.interval_us is NULL and check_duration lets it through: a
/// lease of 'infinity' claims the key with no lease at all (any retry takes it over at once),
/// '-infinity' is accepted as well, and a ttl of 'infinity' fails with 23502.
#[test]
fn infinite_intervals_are_refused() {
    if major() < 17 {
        eprintln!(
            "infinite intervals exist from PostgreSQL 17 on; this is {}",
            major()
        );
        return;
    }
    let server = plain(&[]);
    let mut db = connect(&server, USER, "postgres");
    for (i, call) in [
        "idem_claim('t', 'k$I', 'h', lease => 'infinity')",
        "idem_claim('t', 'k$I', 'h', lease => '-infinity')",
        "idem_claim('t', 'k$I', 'h', ttl => 'infinity')",
        "idem_claim('t', 'k$I', 'h', ttl => '-infinity')",
        "idem_claim_many('t', ARRAY['k$I'], ARRAY['h'], lease => 'infinity')",
        "idem_consume('t', 'k$I', 'infinity')",
    ]
    .into_iter()
    .enumerate()
    {
        let call = call.replace("$I", &i.to_string());
        assert_eq!(
            ask(&mut db, &format!("SELECT * FROM {call}")).code(),
            Some("22023"),
            "{call}"
        );
    }
    assert_eq!(
        claim_into(&mut db, "f", "idem_claim('t', 'hb', 'h')"),
        "claimed"
    );
    assert_eq!(
        ask(
            &mut db,
            &format!(
                "SELECT idem_heartbeat('t', 'hb', {}, 'infinity')",
                fence("f")
            )
        )
        .code(),
        Some("22023")
    );
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
    let server = plain(&[]);
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

// ---------------------------------------------------------------------------------------------
// A DBA's changes to idem.keys
// ---------------------------------------------------------------------------------------------

/// The life of keys as an application sees it, with the answers it must get: (statement,
/// first column). `$F` is the fence kept by the step before (in `my.f`).
const LIFECYCLE: &[(&str, &str)] = &[
    ("SELECT c.outcome FROM idem_claim('t', 'k1', 'h') AS c", "claimed"),
    (
        "SELECT c.outcome FROM idem_claim('t', 'k2', 'h') AS c \
         WHERE pg_catalog.set_config('my.f', c.fence::text, false) IS NOT NULL",
        "claimed",
    ),
    ("SELECT c.outcome FROM idem_claim('t', 'k2', 'h') AS c", "in_progress"),
    ("SELECT c.outcome FROM idem_claim('t', 'k2', 'other') AS c", "mismatch"),
    ("SELECT idem_heartbeat('t', 'k2', $F, '1 min') IS NOT NULL", "t"),
    ("SELECT 'ok' FROM idem_checkpoint('t', 'k2', $F, 'step', '{\"a\": 1}')", "ok"),
    ("SELECT 'ok' FROM idem_assert_fence('t', 'k2', $F)", "ok"),
    // (a maintenance step runs here: MID)
    ("SELECT idem_complete('t', 'k2', $F, 201, '{\"ok\": true}') IS NOT NULL", "t"),
    (
        "SELECT c.outcome || ' ' || c.response_code || ' ' || c.response_body::text \
         FROM idem_claim('t', 'k2', 'h') AS c",
        "completed 201 {\"ok\": true}",
    ),
    ("SELECT idem_consume('t', 'm1')", "t"),
    ("SELECT idem_consume('t', 'm1')", "f"),
    (
        "SELECT string_agg(k, ',') FROM idem_consume_many('t', ARRAY['m1', 'm2', 'm2']) AS k",
        "m2",
    ),
    (
        "SELECT c.outcome FROM idem_claim('t', 'k3', 'h') AS c \
         WHERE pg_catalog.set_config('my.f', c.fence::text, false) IS NOT NULL",
        "claimed",
    ),
    ("SELECT 'ok' FROM idem_release('t', 'k3', $F)", "ok"),
    ("SELECT c.outcome FROM idem_claim('t', 'k3', 'h') AS c", "claimed"),
    ("SELECT idem_forget('t', 'k3')", "t"),
    ("SELECT idem_forget('t', 'k3')", "f"),
    ("SELECT c.outcome FROM idem_claim('t', 'k3', 'h') AS c", "claimed"),
    (
        "SELECT c.outcome FROM idem_claim('t', 'k4', 'h') AS c \
         WHERE pg_catalog.set_config('my.f', c.fence::text, false) IS NOT NULL",
        "claimed",
    ),
    ("SELECT idem_fail_final('t', 'k4', $F, 422) IS NOT NULL", "t"),
    ("SELECT c.outcome FROM idem_claim('t', 'k4', 'h') AS c", "failed"),
    (
        "SELECT c.outcome FROM idem_claim('t', 'k5', 'h', '1 millisecond', '1 millisecond') AS c \
         WHERE pg_catalog.set_config('my.f', c.fence::text, false) IS NOT NULL",
        "claimed",
    ),
    ("SELECT idem_complete('t', 'k5', $F, 200) IS NOT NULL", "t"),
    ("SELECT pg_catalog.pg_sleep(0.02)::text", ""),
    ("SELECT idem_purge()", "1"),
    ("SELECT c.outcome FROM idem_claim('t', 'k5', 'h') AS c", "claimed"),
    (
        "SELECT pg_catalog.set_config('my.fs', pg_catalog.array_agg(c.fence ORDER BY c.key)::text, false) \
                IS NOT NULL \
         FROM idem_claim_many('t', ARRAY['b1', 'b2'], ARRAY['h', 'h']) AS c",
        "t",
    ),
    (
        "SELECT count(*) FROM idem_complete_many('t', ARRAY['b1', 'b2'], \
                pg_catalog.current_setting('my.fs')::bigint[], ARRAY[200, 201])",
        "2",
    ),
    ("SELECT c.outcome FROM idem_claim('t', 'b2', 'h') AS c", "completed"),
];

/// Where a maintenance step (VACUUM FULL ...) runs in LIFECYCLE: after assert_fence.
const MID: usize = 7;

/// The SQL edition in a new database `db`; `change` run there by the owner, then LIFECYCLE
/// by app_user (and `mid` by the owner at MID). Returns what went wrong: an answer other than
/// the expected one before any refusal (a wrong answer, not a refusal), an internal error
/// (XX000 other than the documented refusal of impossible data), or a statement that ran
/// into the timeout.
fn lifecycle_after(server: &Server, db: &str, change: &str, mid: &str) -> Vec<String> {
    server
        .client()
        .batch_execute(&format!("CREATE DATABASE {db} OWNER {ADMIN}"))
        .unwrap();
    install(server, db);
    let mut admin = connect(server, ADMIN, db);
    if let Answer::Error { code, message } = ask(&mut admin, change) {
        return vec![format!("the change itself failed: {code} {message}")];
    }
    let mut user = connect_with(server, USER, db, "10s");
    let mut problems = Vec::new();
    let mut refused = false;
    for (i, (sql, expected)) in LIFECYCLE.iter().enumerate() {
        if i == MID && !mid.is_empty() {
            if let Answer::Error { code, message } = ask(&mut admin, mid) {
                problems.push(format!("{mid}: {code} {message}"));
            }
        }
        let sql = sql.replace("$F", &fence("f"));
        match ask(&mut user, &sql) {
            Answer::Error { code, message } => {
                refused = true;
                let impossible = code == "XX000" && message.starts_with("pg_idem internal error");
                if (code.starts_with("XX") && !impossible) || code == "57014" || code == "client" {
                    problems.push(format!("{sql}: {code} {message}"));
                }
            }
            answer => {
                if !refused && answer.first() != *expected {
                    problems.push(format!(
                        "{sql}: answered {:?}, not {expected:?} (and nothing was refused)",
                        answer.first()
                    ));
                }
            }
        }
    }
    problems
}

/// Changes a DBA makes around pg_idem's columns, and maintenance of idem.keys: every call
/// answers as on the table pg_idem created, or is refused with a clear error (a constraint,
/// a privilege), never an internal error, a hang or a wrong answer.
#[test]
fn a_dbas_changes_around_the_columns_give_right_answers_or_clear_refusals() {
    let server = plain(&[]);
    let mut failures = Vec::new();
    for (i, (change, mid)) in [
        ("ALTER TABLE idem.keys ADD COLUMN note text", ""),
        ("ALTER TABLE idem.keys ADD COLUMN note text NOT NULL DEFAULT 'x'", ""),
        ("ALTER TABLE idem.keys ADD COLUMN must int NOT NULL", ""),
        ("CREATE INDEX ON idem.keys (response_code)", ""),
        ("CREATE INDEX ON idem.keys ((response_body->>'id'))", ""),
        ("ALTER TABLE idem.keys ADD CONSTRAINT c CHECK (response_code < 300)", ""),
        (
            "CREATE FUNCTION public.audit() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RETURN COALESCE(NEW, OLD); END $$; \
             CREATE TRIGGER audit BEFORE INSERT OR UPDATE OR DELETE ON idem.keys \
             FOR EACH ROW EXECUTE FUNCTION public.audit()",
            "",
        ),
        (
            "CREATE TABLE public.log (t text); CREATE FUNCTION public.logged() RETURNS trigger \
             LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public.log VALUES (TG_OP); RETURN NULL; END $$; \
             CREATE TRIGGER logged AFTER INSERT OR UPDATE OR DELETE ON idem.keys \
             FOR EACH STATEMENT EXECUTE FUNCTION public.logged()",
            "",
        ),
        ("CREATE RULE noup AS ON UPDATE TO idem.keys DO INSTEAD NOTHING", ""),
        (
            "CREATE TABLE public.log (t text); \
             CREATE RULE logdel AS ON DELETE TO idem.keys DO ALSO INSERT INTO public.log VALUES (OLD.key)",
            "",
        ),
        ("ALTER TABLE idem.keys ENABLE ROW LEVEL SECURITY", ""),
        (
            "ALTER TABLE idem.keys ENABLE ROW LEVEL SECURITY; ALTER TABLE idem.keys FORCE ROW LEVEL SECURITY",
            "",
        ),
        (
            "ALTER TABLE idem.keys ENABLE ROW LEVEL SECURITY; ALTER TABLE idem.keys FORCE ROW LEVEL SECURITY; \
             CREATE POLICY everything ON idem.keys USING (true)",
            "",
        ),
        ("ALTER TABLE idem.keys SET (fillfactor = 10, autovacuum_enabled = off)", ""),
        ("ALTER TABLE idem.keys REPLICA IDENTITY FULL", ""),
        ("ALTER TABLE idem.keys SET UNLOGGED", ""),
        ("ALTER TABLE idem.keys ALTER COLUMN response_body SET STORAGE EXTERNAL", ""),
        ("SELECT 1", "VACUUM FULL idem.keys"),
        ("SELECT 1", "REINDEX TABLE idem.keys"),
        ("SELECT 1", "CLUSTER idem.keys USING keys_pkey"),
        ("SELECT 1", "VACUUM (ANALYZE, FREEZE) idem.keys"),
        ("ALTER TABLE idem.keys SET (fillfactor = 50)", "VACUUM FULL idem.keys"),
        (
            "SELECT 1",
            "ALTER TABLE idem.keys DROP CONSTRAINT keys_pkey; \
             ALTER TABLE idem.keys ADD CONSTRAINT keys_pkey PRIMARY KEY (tenant, key)",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let problems = lifecycle_after(&server, &format!("change_{i}"), change, mid);
        if !problems.is_empty() {
            failures.push(format!("{change} / {mid}:\n    {}", problems.join("\n    ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_no_crash(&server);
}

/// A trigger or a rule that drops a write pg_idem makes (a BEFORE trigger returning NULL, a
/// DO INSTEAD NOTHING rule): the call must fail, not report success for a write that never
/// happened (a release that left the key held, a completion never stored, a forget that
/// answers false for a key that exists), nor retry forever (idem_consume loops while its
/// INSERT inserts nothing). The native edition refuses the rules (a write with RETURNING);
/// with a trigger returning NULL it behaves as the SQL edition does (the same wrong answers,
/// the same endless consume): a finding for both editions.
#[test]
fn a_write_a_trigger_or_rule_drops_is_refused() {
    let server = plain(&[]);
    let skip = |when: &str| {
        format!(
            "CREATE FUNCTION public.skip() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$; \
             CREATE TRIGGER skip BEFORE {when} ON idem.keys FOR EACH ROW EXECUTE FUNCTION public.skip()"
        )
    };
    let mut failures = Vec::new();
    for (i, change) in [
        skip("INSERT"),
        skip("UPDATE"),
        skip("DELETE"),
        "CREATE RULE noins AS ON INSERT TO idem.keys DO INSTEAD NOTHING".to_string(),
        "CREATE RULE nodel AS ON DELETE TO idem.keys DO INSTEAD NOTHING".to_string(),
    ]
    .into_iter()
    .enumerate()
    {
        let problems = lifecycle_after(&server, &format!("dropped_{i}"), &change, "");
        if !problems.is_empty() {
            failures.push(format!("{change}:\n    {}", problems.join("\n    ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_no_crash(&server);
}

/// Row level security forced on idem.keys with a restrictive policy that hides some rows from
/// pg_idem's owner: natively the extension's owner is a superuser and sees every row; the SQL
/// edition's owner is not, and must refuse (pg_idem cannot act on keys it cannot see) rather
/// than answer from the rows it sees.
#[test]
fn row_level_security_hiding_keys_from_the_owner_is_refused() {
    let server = plain(&[]);
    let problems = lifecycle_after(
        &server,
        "rls",
        "ALTER TABLE idem.keys ENABLE ROW LEVEL SECURITY; ALTER TABLE idem.keys FORCE ROW LEVEL SECURITY; \
         CREATE POLICY everything ON idem.keys USING (true); \
         CREATE POLICY hide ON idem.keys AS RESTRICTIVE FOR SELECT USING (key <> 'k2')",
        "",
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_no_crash(&server);
}

/// A type changed under one of pg_idem's columns: natively every call is refused with 55000
/// ("idem.keys is not the table pg_idem created", src/store/definition.rs), and so in the SQL
/// edition (idem.keys_as_created, sql/edition/settings.sql): right answers or clear refusals.
#[test]
fn a_changed_column_type_gives_right_answers_or_clear_refusals() {
    let server = plain(&[]);
    let mut failures = Vec::new();
    for (i, change) in [
        "ALTER TABLE idem.keys ALTER COLUMN response_code TYPE bigint",
        "ALTER TABLE idem.keys ALTER COLUMN state TYPE text",
        "ALTER TABLE idem.keys ALTER COLUMN key TYPE varchar(2)",
        "ALTER TABLE idem.keys ALTER COLUMN ttl TYPE text",
        "ALTER TABLE idem.keys ALTER COLUMN request_hash TYPE text",
        "ALTER TABLE idem.keys ALTER COLUMN fence TYPE numeric",
        "ALTER TABLE idem.keys ALTER COLUMN response_body TYPE json",
        "ALTER TABLE idem.keys ALTER COLUMN tenant TYPE text COLLATE \"C\"",
        "ALTER TABLE idem.keys ALTER COLUMN lease_expires_at SET NOT NULL",
        "ALTER TABLE idem.keys DROP COLUMN checkpoint_data",
        "ALTER TABLE idem.keys RENAME COLUMN response_body TO body",
        "ALTER TABLE idem.keys ALTER COLUMN purge_after DROP NOT NULL",
    ]
    .into_iter()
    .enumerate()
    {
        let problems = lifecycle_after(&server, &format!("type_{i}"), change, "");
        if !problems.is_empty() {
            failures.push(format!("{change}:\n    {}", problems.join("\n    ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_no_crash(&server);
}

/// expires_at changed to timestamp (without time zone) by a DBA: the SQL edition's implicit
/// casts would convert with each session's TimeZone, so a key completed by a session in
/// UTC-12 would have expired for a session in UTC+14, which would claim it again and run the
/// effect twice. As natively, every call on such a table is refused (55000), in a session that
/// called before the change too; and the check is not paid per call (idem.keys_as_created runs
/// when idem.owner_settings' statement is planned, once per session and change of the table).
#[test]
fn a_changed_column_type_is_refused_as_natively() {
    let server = plain(&["track_functions = 'pl'"]);
    server
        .client()
        .batch_execute(&format!("CREATE DATABASE tz OWNER {ADMIN}"))
        .unwrap();
    install(&server, "tz");
    let mut west = connect(&server, USER, "tz");
    west.batch_execute("SET TimeZone = 'Etc/GMT+12'").unwrap();
    // before the change: many calls, one check for each place that reads the settings (the
    // call's own expression, the first call's check of the session's settings, the purge in
    // passing), none more for more calls
    let checks = |db: &mut Client| -> i64 {
        one(
            db,
            "SELECT COALESCE(pg_catalog.sum(f.calls), 0) FROM pg_catalog.pg_stat_xact_user_functions AS f \
             WHERE f.schemaname = 'idem' AND f.funcname = 'keys_as_created'",
        )
        .parse()
        .unwrap()
    };
    west.batch_execute("BEGIN").unwrap();
    let claims = |db: &mut Client, from: usize| {
        for i in from..from + 40 {
            one(
                db,
                &format!("SELECT c.outcome FROM idem_claim('t', 'before{i}', 'h') AS c"),
            );
        }
    };
    claims(&mut west, 0);
    let first = checks(&mut west);
    assert!(
        (1..=4).contains(&first),
        "the check runs once per place, not per call: {first} for 40 calls"
    );
    claims(&mut west, 40);
    assert_eq!(checks(&mut west), first, "40 more calls, no more checks");
    west.batch_execute("COMMIT").unwrap();
    connect(&server, ADMIN, "tz")
        .batch_execute("ALTER TABLE idem.keys ALTER COLUMN expires_at TYPE timestamp")
        .unwrap();
    for session in [&mut west, &mut connect(&server, USER, "tz")] {
        match session.simple_query(
            "SELECT c.outcome FROM idem_claim('t', 'order', 'h', ttl => '1 hour') AS c",
        ) {
            Ok(rows) => panic!("a claim on the changed table answered {rows:?}"),
            Err(e) => {
                let e = e.as_db_error().expect("a server error");
                assert_eq!(e.code().code(), "55000");
                assert_eq!(e.message(), "idem.keys is not the table pg_idem created");
                assert_eq!(
                    e.detail(),
                    Some(
                        "Column expires_at has type timestamp without time zone; pg_idem stores \
                         timestamp with time zone there."
                    )
                );
                assert!(e
                    .hint()
                    .is_some_and(|h| h.contains("ALTER TABLE idem.keys")));
            }
        }
    }
    // undone: answered again
    connect(&server, ADMIN, "tz")
        .batch_execute("ALTER TABLE idem.keys ALTER COLUMN expires_at TYPE timestamptz")
        .unwrap();
    assert_eq!(
        one(
            &mut west,
            "SELECT c.outcome FROM idem_claim('t', 'order', 'h') AS c"
        ),
        "claimed"
    );
    assert_no_crash(&server);
}
