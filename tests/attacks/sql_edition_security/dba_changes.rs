//! A DBA's changes to idem.keys (columns, indexes, triggers, rules, row level security,
//! VACUUM FULL, REINDEX, CLUSTER): right answers or clear refusals.

use super::*;

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
    let server = plain_server(&[]);
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
    let server = plain_server(&[]);
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
    let server = plain_server(&[]);
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
    let server = plain_server(&[]);
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
    let server = plain_server(&["track_functions = 'pl'"]);
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
                // the native hint, word for word (tests/pg_regress/expected/errors.out)
                assert_eq!(
                    e.hint(),
                    Some(
                        "Undo the change with ALTER TABLE idem.keys (pg_idem's own columns must \
                         keep the type, collation and NOT NULL that CREATE EXTENSION gave them). \
                         Columns of your own, defaults, triggers and rules are allowed: \
                         docs/maintenance.md, Changing idem.keys."
                    )
                );
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
