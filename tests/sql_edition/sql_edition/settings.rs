//! pg_idem's settings in both editions: natively GUCs, which a superuser sets with ALTER
//! DATABASE or ALTER ROLE ... SET; in the SQL edition rows of idem.settings and
//! idem.role_settings, which pg_idem's owner (no superuser) writes. The same values must be
//! read the same way, refused with the same errors, and reach every session the same way.

use std::sync::{Arc, Mutex};

use super::*;

/// Values as a DBA writes them: units and fractions, bounds, booleans' prefixes, odd numbers,
/// case, typos. Each is set natively with SET (then read from pg_settings.setting) and written
/// to idem.settings in the SQL edition (then read back): the same stored value or the same
/// error (SQLSTATE, message, detail, hint).
const SETTING_VALUES: &[(&str, &str)] = &[
    ("pg_idem.ttl", "1d"),
    ("pg_idem.ttl", "90min"),
    ("pg_idem.ttl", "1.5min"),
    ("pg_idem.ttl", "1500ms"),
    ("pg_idem.ttl", " 30 s "),
    ("pg_idem.ttl", "1e3"),
    ("pg_idem.ttl", "0x10"),
    ("pg_idem.ttl", "010"),
    ("pg_idem.ttl", "2 seconds"),
    ("pg_idem.ttl", "10 S"),
    ("pg_idem.ttl", "banana"),
    ("pg_idem.ttl", ""),
    ("pg_idem.ttl", "0"),
    ("pg_idem.ttl", "-5"),
    ("pg_idem.ttl", "400ms"),
    ("pg_idem.ttl", "3000000000"),
    ("pg_idem.lease_timeout", "30s"),
    ("pg_idem.lease_timeout", "1.2345s"),
    ("pg_idem.lease_timeout", "2500us"),
    ("pg_idem.lease_timeout", "250"),
    ("pg_idem.lease_timeout", "1h"),
    ("pg_idem.max_key_length", "100"),
    ("pg_idem.max_key_length", "12.6"),
    ("pg_idem.max_key_length", "1025"),
    ("pg_idem.max_key_length", "2kB"),
    ("pg_idem.max_response_bytes", "64kB"),
    ("pg_idem.max_response_bytes", "1.5MB"),
    ("pg_idem.max_response_bytes", "2GB"),
    ("pg_idem.max_response_bytes", "1 kb"),
    ("pg_idem.max_batch_keys", "100000"),
    ("pg_idem.max_batch_keys", "100001"),
    ("pg_idem.tenant_grants", "on"),
    ("pg_idem.tenant_grants", "TRUE"),
    ("pg_idem.tenant_grants", "y"),
    ("pg_idem.tenant_grants", "of"),
    ("pg_idem.tenant_grants", "o"),
    ("pg_idem.tenant_grants", "0"),
    ("pg_idem.tenant_grants", "maybe"),
    ("pg_idem.reject_stale_uuidv7", "yes"),
    ("pg_idem.reject_stale_uuidv7", "2"),
    ("PG_IDEM.TTL", "2h"),
    ("pg_idem.tll", "1d"),
    ("ttl", "1d"),
];

fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

impl Target {
    /// Runs `native` as a superuser natively, `sql_edition` as pg_idem's owner elsewhere.
    fn configure(&self, native: &str, sql_edition: &str) {
        let (mut client, sql) = match self {
            Target::Native(_) => (self.granter(), native),
            Target::Plain(_) | Target::Tle(_) => (self.client_as(ADMIN), sql_edition),
        };
        client
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{}: {sql}: {e:?}", self.name()));
    }

    /// How the edition stores one value of a setting: natively SET, then pg_settings.setting;
    /// in the SQL edition a row of idem.settings (or idem.role_settings), read back.
    fn store(&self, name: &str, value: &str, for_role: bool) -> Answer {
        match self {
            Target::Native(_) => {
                let mut superuser = self.granter();
                run_step(
                    &mut superuser,
                    &format!(
                        "SET {name} = {}; SELECT s.setting FROM pg_catalog.pg_settings AS s \
                         WHERE s.name = pg_catalog.lower({})",
                        quoted(value),
                        quoted(name)
                    ),
                )
            }
            Target::Plain(_) | Target::Tle(_) => {
                let mut owner = self.client_as(ADMIN);
                let sql = if for_role {
                    format!(
                        "INSERT INTO idem.role_settings VALUES ('{USER}', {}, {}) \
                         ON CONFLICT (role, name) DO UPDATE SET value = EXCLUDED.value RETURNING value",
                        quoted(name),
                        quoted(value)
                    )
                } else {
                    format!(
                        "INSERT INTO idem.settings VALUES ({}, {}) \
                         ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value RETURNING value",
                        quoted(name),
                        quoted(value)
                    )
                };
                run_step(&mut owner, &sql)
            }
        }
    }
}

/// The SQLSTATE `sql` fails with (None: it did not fail).
fn error_code(client: &mut Client, sql: &str) -> Option<String> {
    match run_step(client, sql) {
        Answer::Error { code, .. } => Some(code),
        Answer::Rows(_) => None,
    }
}

/// The first column of the first row `sql` gives.
fn first(client: &mut Client, sql: &str) -> String {
    match run_step(client, sql) {
        Answer::Rows(rows) => rows[0][0].clone().unwrap_or_default(),
        error => panic!("{sql}: {error:?}"),
    }
}

fn sql_edition_targets() -> Vec<Target> {
    let mut targets = vec![Target::native(), Target::plain()];
    targets.extend(Target::tle(pg_idem_tests::major()));
    targets
}

/// Every value a DBA may write is stored as the native edition stores it, or refused with the
/// native error: the SQL edition reads settings with PostgreSQL's units, rounding and bounds.
#[test]
fn settings_are_read_and_refused_as_natively() {
    let targets = sql_edition_targets();
    for for_role in [false, true] {
        for (name, value) in SETTING_VALUES {
            let mut native = targets[0].store(name, value, false);
            if pg_idem_tests::major() < 15 && *name == "pg_idem.tll" {
                // PostgreSQL 14 cannot reserve a prefix (src/pg/guc.rs only warns): natively
                // a misspelt name is a placeholder there; the SQL edition refuses it with
                // 15's error on every version (docs/settings.md)
                assert_eq!(native, Answer::Rows(vec![]), "native {name} on 14");
                native = Answer::Error {
                    code: "42602".into(),
                    message: format!("invalid configuration parameter name \"{name}\""),
                    detail: Some("\"pg_idem\" is a reserved prefix.".into()),
                    hint: None,
                };
            }
            for target in &targets[1..] {
                assert_eq!(
                    target.store(name, value, for_role),
                    native,
                    "{} (role: {for_role}) differs from the native edition: {name} = {value:?}",
                    target.name()
                );
            }
        }
    }
    // the definitions (type, unit, bounds, default) are the native GUCs'
    let native = run_step(
        &mut targets[0].granter(),
        "SELECT s.name, s.vartype, s.unit, s.min_val, s.max_val, s.boot_val \
         FROM pg_catalog.pg_settings AS s WHERE s.name LIKE 'pg\\_idem.%' ORDER BY s.name",
    );
    for target in &targets[1..] {
        let definitions = run_step(
            &mut target.client_as(ADMIN),
            "SELECT d.name, d.vartype, d.unit, d.min_val::text, d.max_val::text, d.boot_val \
             FROM idem.setting_definitions() AS d WHERE d.scope <> 'database' ORDER BY d.name",
        );
        assert_eq!(definitions, native, "{}", target.name());
        // and the defaults a call starts from are those of the definitions
        let mut owner = target.client_as(ADMIN);
        owner
            .batch_execute("DELETE FROM idem.settings; DELETE FROM idem.role_settings")
            .expect("back to the defaults");
        let defaults = first(
            &mut owner,
            "SELECT pg_catalog.format('%s', idem.owner_settings(false)) = pg_catalog.format('(%s,%s,%s,%s,%s,%s,%s)',
                    (d->>'pg_idem.tenant_grants')::bool, d->>'pg_idem.max_key_length',
                    d->>'pg_idem.max_response_bytes', d->>'pg_idem.max_batch_keys',
                    (d->>'pg_idem.lease_timeout')::bigint * 1000, (d->>'pg_idem.ttl')::bigint * 1000000,
                    (d->>'pg_idem.reject_stale_uuidv7')::bool)
             FROM (SELECT pg_catalog.jsonb_object_agg(s.name, s.boot_val) AS d
                     FROM idem.setting_definitions() AS s) AS definitions",
        );
        assert_eq!(
            defaults,
            "t",
            "{}: idem.owner_settings()'s defaults",
            target.name()
        );
    }
}

/// What the README recommends for each edition sets pg_idem's defaults for a database and
/// for one role, reaching every session that connects (as through a pooler: no session SET),
/// with the role's before the database's and a transaction's SET LOCAL before both; in the
/// SQL edition written by an owner that is no superuser, plainly and through pg_tle.
#[test]
fn the_owners_settings_reach_every_session_per_database_and_role() {
    const OTHER: &str = "other_user";
    let targets = sql_edition_targets();
    for target in &targets {
        target
            .client_as(ADMIN)
            .batch_execute(&format!("CREATE ROLE {OTHER} LOGIN"))
            .expect("another role");
        target.configure(
            &format!(
                "DO $$ BEGIN
                     EXECUTE pg_catalog.format('ALTER DATABASE %I SET pg_idem.ttl = ''2h''', pg_catalog.current_database());
                     EXECUTE pg_catalog.format('ALTER DATABASE %I SET pg_idem.lease_timeout = ''45s''', pg_catalog.current_database());
                 END $$;
                 ALTER ROLE {USER} SET pg_idem.ttl = '3h';
                 ALTER ROLE {USER} SET pg_idem.max_key_length = 8;"
            ),
            &format!(
                "INSERT INTO idem.settings VALUES ('pg_idem.ttl', '2h'), ('pg_idem.lease_timeout', '45s');
                 INSERT INTO idem.role_settings VALUES ('{USER}', 'pg_idem.ttl', '3h'),
                                                       ('{USER}', 'pg_idem.max_key_length', '8');"
            ),
        );
    }
    let times = |key: &str| {
        format!(
            "SELECT pg_catalog.round(EXTRACT(epoch FROM c.expires_at - pg_catalog.clock_timestamp()) / 60) AS ttl_minutes, \
                    pg_catalog.round(EXTRACT(epoch FROM c.lease_expires_at - pg_catalog.clock_timestamp())) AS lease_seconds \
             FROM idem_claim('t', '{key}', 'h') AS c"
        )
    };
    let local = format!(
        "BEGIN; SET LOCAL pg_idem.ttl = '10min'; {}; COMMIT",
        times("k3")
    );
    let user = conform(
        &targets,
        USER,
        &[
            (0, &times("k1")),
            (0, &fails("SELECT idem_claim('t', 'ninechars', 'h')")),
            (0, &local),
            (0, &times("k4")),
        ],
    );
    let minutes = |answer: &Answer| match answer {
        Answer::Rows(rows) => (rows[0][0].clone(), rows[0][1].clone()),
        other => panic!("{other:?}"),
    };
    let some = |a: &str, b: &str| (Some(a.to_string()), Some(b.to_string()));
    assert_eq!(
        minutes(&user[0]),
        some("180", "45"),
        "the role's ttl, the database's lease"
    );
    assert_eq!(minutes(&user[2]), some("10", "45"), "SET LOCAL first");
    assert_eq!(
        minutes(&user[3]),
        some("180", "45"),
        "SET LOCAL ends with its transaction"
    );
    let other = conform(
        &targets,
        OTHER,
        &[
            (0, &times("k5")),
            (0, &claim("idem_claim('t', 'ninechars', 'h')")),
        ],
    );
    assert_eq!(minutes(&other[0]), some("120", "45"), "the database's ttl");
}

/// A connection as `role` to a plain SQL-edition server that collects its WARNINGs.
fn warned(server: &Server, role: &str) -> (Client, Arc<Mutex<Vec<String>>>) {
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let seen = warnings.clone();
    let mut config: postgres::Config = server
        .conninfo_as(role, "postgres")
        .parse()
        .expect("conninfo");
    config.notice_callback(move |n| {
        if n.severity() == "WARNING" {
            seen.lock().unwrap().push(n.message().to_string());
        }
    });
    (config.connect(NoTls).expect("connect"), warnings)
}

/// The SQL edition cannot refuse a session's SET of a pg_idem.* placeholder, so the settings
/// only its owner may change (natively a superuser's: tenant_grants and the limits) are read
/// from its tables only; a session's own value is ignored, and said so once (a WARNING naming
/// the setting and where it is set instead), and again only when the session sets another.
/// A pg_idem.* name pg_idem has not, which natively cannot be set, is warned about when
/// ALTER ROLE or ALTER DATABASE gave it to the session.
#[test]
fn a_sessions_own_owner_settings_are_ignored_and_said_once() {
    let Target::Plain(server) = Target::plain() else {
        unreachable!()
    };
    server
        .client()
        .batch_execute(&format!("ALTER ROLE {USER} SET pg_idem.tll = '1d'"))
        .expect("a typo, by a superuser");
    let (mut db, warnings) = warned(&server, USER);
    let claim_of = |db: &mut Client, key: &str| {
        first(
            db,
            &format!("SELECT c.outcome FROM idem_claim('t', '{key}', 'h') AS c"),
        )
    };
    assert_eq!(claim_of(&mut db, "k1"), "claimed");
    assert_eq!(
        *warnings.lock().unwrap(),
        ["invalid configuration parameter name \"pg_idem.tll\""]
    );
    warnings.lock().unwrap().clear();
    db.batch_execute("SET pg_idem.max_key_length = 3; SET pg_idem.tenant_grants = off")
        .unwrap();
    for key in ["long-key-1", "long-key-2"] {
        assert_eq!(
            claim_of(&mut db, key),
            "claimed",
            "the session's limit is ignored"
        );
    }
    assert_eq!(
        *warnings.lock().unwrap(),
        [
            "pg_idem.max_key_length set for this session is ignored",
            "pg_idem.tenant_grants set for this session is ignored"
        ],
        "once per setting"
    );
    warnings.lock().unwrap().clear();
    db.batch_execute("SET pg_idem.max_key_length = 4").unwrap();
    assert_eq!(claim_of(&mut db, "long-key-3"), "claimed");
    assert_eq!(
        *warnings.lock().unwrap(),
        ["pg_idem.max_key_length set for this session is ignored"],
        "again for a new value"
    );
    // and the owner's rows are what counts
    server
        .client_as(ADMIN)
        .batch_execute("INSERT INTO idem.settings VALUES ('pg_idem.max_key_length', '5')")
        .unwrap();
    assert_eq!(
        error_code(&mut db, "SELECT idem_claim('t', 'long-key-4', 'h')").as_deref(),
        Some("22023")
    );
}

/// Names, values and rows the owner's tables refuse: what only the native purge worker has,
/// the purge in passing for one role, a role that does not exist.
#[test]
fn the_owners_tables_refuse_what_the_sql_edition_cannot_follow() {
    let target = Target::plain();
    let mut owner = target.client_as(ADMIN);
    for (sql, code) in [
        (
            "INSERT INTO idem.settings VALUES ('pg_idem.purge_interval', '1min')",
            "0A000",
        ),
        (
            "INSERT INTO idem.role_settings VALUES ('app_user', 'pg_idem.purge_in_passing', 'off')",
            "0A000",
        ),
        (
            "INSERT INTO idem.role_settings VALUES ('nobody', 'pg_idem.ttl', '1h')",
            "42704",
        ),
        // a row written with the owner's trigger off is still held to the stored form
        (
            "BEGIN; ALTER TABLE idem.settings DISABLE TRIGGER settings_row; \
             INSERT INTO idem.settings VALUES ('pg_idem.ttl', '1d')",
            "23514",
        ),
    ] {
        assert_eq!(error_code(&mut owner, sql).as_deref(), Some(code), "{sql}");
        owner.batch_execute("ROLLBACK").ok();
    }
    assert_eq!(
        first(
            &mut owner,
            "INSERT INTO idem.settings VALUES ('pg_idem.purge_in_passing', 'OFF') \
             ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value RETURNING value"
        ),
        "off"
    );
}
