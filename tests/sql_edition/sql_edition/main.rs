//! The SQL edition (scripts/sql_edition.py) against the native edition: the same calls, made
//! through real client connections by the same unprivileged role, in the same order and the
//! same transactions, must give the same answers and the same errors (SQLSTATE, message,
//! detail and hint), on a native server (preloaded) and on a server where the SQL edition was
//! installed plainly (psql -f) or through pg_tle (a managed-style server, as on RDS).
//!
//! Fences and times differ between two servers by nature: the steps project them (a fence
//! carried in a session variable, a time compared with the clock), and the times inside error
//! details are masked.

use pg_idem_tests::managed::{self, ManagedServer};
use pg_idem_tests::{simple_rows, sql_edition, Client, Edition, NoTls, Server};

mod settings;

/// Where the calls go.
enum Target {
    /// pg_idem's library preloaded, CREATE EXTENSION pg_idem
    Native(Server),
    /// the SQL edition's plain install, run by the database's owner (not a superuser)
    Plain(Server),
    /// the SQL edition through pg_tle, on a managed-style server
    Tle(ManagedServer),
}

/// The roles every target has: the same names, so that errors naming a role compare equal.
const ADMIN: &str = managed::ADMIN;
const USER: &str = managed::USER;

/// The native edition purges with its worker only (paused in these tests): so that the steps
/// purge the same keys, the SQL edition's calls do not purge in passing either.
fn no_purge_in_passing(owner: &mut Client) {
    owner
        .batch_execute("INSERT INTO idem.settings VALUES ('pg_idem.purge_in_passing', 'off')")
        .expect("purge in passing off");
}

impl Target {
    fn native() -> Target {
        // the purge worker paused: the SQL edition has none, and the steps purge themselves
        let server = Server::start_as(Edition::Native, &["pg_idem.purge_interval = 0"]);
        managed::app_roles(&server);
        Target::Native(server)
    }

    /// The native edition installed but not preloaded: what the SQL edition's statistics are
    /// (no shared memory, no purge worker)
    fn native_not_preloaded() -> Target {
        let server = Server::start_bare(&[]);
        server
            .client()
            .batch_execute("CREATE EXTENSION pg_idem")
            .expect("create extension");
        managed::app_roles(&server);
        Target::Native(server)
    }

    fn plain() -> Target {
        let server = managed::plain_server(&[]);
        no_purge_in_passing(&mut server.client_as(ADMIN));
        Target::Plain(server)
    }

    fn tle(major: u32) -> Option<Target> {
        let server = ManagedServer::start(major)?;
        let mut admin = server.client_as(ADMIN);
        admin
            .batch_execute(&sql_edition().tle)
            .expect("pgtle.install_extension of the SQL edition");
        admin
            .batch_execute("CREATE EXTENSION pg_idem")
            .expect("CREATE EXTENSION pg_idem through pg_tle");
        no_purge_in_passing(&mut admin);
        Some(Target::Tle(server))
    }

    fn name(&self) -> &'static str {
        match self {
            Target::Native(_) => "native",
            Target::Plain(_) => "SQL edition (plain)",
            Target::Tle(_) => "SQL edition (pg_tle)",
        }
    }

    fn client_as(&self, role: &str) -> Client {
        match self {
            Target::Native(s) | Target::Plain(s) => s.client_as(role),
            Target::Tle(s) => s.client_as(role),
        }
    }

    /// Turns pg_idem.tenant_grants on, as each edition lets its administrator: natively a
    /// superuser's setting; in the SQL edition a row of idem.settings only the owner may change.
    fn tenant_grants_on(&self) {
        match self {
            Target::Native(s) => s
                .client()
                .batch_execute("ALTER DATABASE postgres SET pg_idem.tenant_grants = on")
                .expect("tenant_grants on"),
            Target::Plain(_) | Target::Tle(_) => self
                .client_as(ADMIN)
                .batch_execute(
                    "INSERT INTO idem.settings VALUES ('pg_idem.tenant_grants', 'on') \
                     ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                )
                .expect("tenant_grants on"),
        }
    }

    /// Who grants tenants: a superuser natively (the functions are revoked from PUBLIC), the
    /// owner in the SQL edition.
    fn granter(&self) -> Client {
        match self {
            Target::Native(s) => s.client(),
            Target::Plain(_) | Target::Tle(_) => self.client_as(ADMIN),
        }
    }
}

/// What a step gave: its rows as text, or its error's fields.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Rows(Vec<Vec<Option<String>>>),
    Error {
        code: String,
        message: String,
        detail: Option<String>,
        hint: Option<String>,
    },
}

/// Times and fences inside messages differ between two servers.
fn mask_times(text: &str) -> String {
    let masked = mask_clock_times(text);
    // "fence 123" and "Fence 123"
    let words: Vec<&str> = masked.split(' ').collect();
    let mut out: Vec<String> = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let after_fence = i > 0 && words[i - 1].eq_ignore_ascii_case("fence");
        if after_fence && word.starts_with(|c: char| c.is_ascii_digit()) {
            out.push(
                word.trim_start_matches(|c: char| c.is_ascii_digit())
                    .to_string(),
            );
            out.last_mut().expect("pushed").insert_str(0, "<fence>");
        } else {
            out.push(word.to_string());
        }
    }
    out.join(" ")
}

fn mask_clock_times(text: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        // yyyy-mm-dd hh:mm:ss[.ffffff]+zz
        let is_time = chars.len() >= i + 19
            && chars[i..i + 4].iter().all(char::is_ascii_digit)
            && chars[i + 4] == '-'
            && chars[i + 10] == ' '
            && chars[i + 13] == ':';
        if is_time {
            out.push_str("<time>");
            i += 19;
            while i < chars.len() && (chars[i].is_ascii_digit() || ".+-:".contains(chars[i])) {
                i += 1;
            }
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

fn run_step(client: &mut Client, sql: &str) -> Answer {
    match simple_rows(client, sql) {
        Ok(rows) => Answer::Rows(rows),
        Err(e) => {
            let db = e
                .as_db_error()
                .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"));
            Answer::Error {
                code: db.code().code().to_string(),
                message: mask_times(db.message()),
                detail: db.detail().map(mask_times),
                hint: db.hint().map(str::to_string),
            }
        }
    }
}

/// A statement that must fail (on the first target, the native edition): two editions that
/// both failed where they should not would otherwise compare equal.
const FAILS: &str = "-- fails\n";

/// Runs `steps` (session number, statement) on each target, sessions connected as `role`, and
/// asserts that every target answers every step as the first one does; returns the answers.
/// A step fails on the first target exactly when it starts with `FAILS`.
fn conform(targets: &[Target], role: &str, steps: &[(usize, &str)]) -> Vec<Answer> {
    let sessions = steps.iter().map(|(s, _)| s + 1).max().unwrap_or(1);
    let mut answers: Vec<Vec<Answer>> = Vec::new();
    for target in targets {
        let mut clients: Vec<Client> = (0..sessions).map(|_| target.client_as(role)).collect();
        answers.push(
            steps
                .iter()
                .map(|(session, sql)| run_step(&mut clients[*session], sql))
                .collect(),
        );
    }
    let (first, rest) = answers.split_first().expect("a target");
    for ((session, sql), answer) in steps.iter().zip(first) {
        assert_eq!(
            matches!(answer, Answer::Error { .. }),
            sql.starts_with(FAILS),
            "{} at session {session}: {sql}\n{answer:?}",
            targets[0].name()
        );
    }
    for (target, theirs) in targets[1..].iter().zip(rest) {
        for (((session, sql), expected), got) in steps.iter().zip(first).zip(theirs) {
            assert_eq!(
                got,
                expected,
                "{} differs from {} at session {session}: {sql}",
                target.name(),
                targets[0].name()
            );
        }
    }
    answers.into_iter().next().expect("a target")
}

/// The columns of idem_claim's result that do not differ between servers by nature.
fn claim(call: &str) -> String {
    format!(
        "SELECT c.outcome, c.fence IS NOT NULL AS fence, c.attempt, c.response_code, c.response_body, \
                c.lease_expires_at IS NOT NULL AS leased, \
                c.expires_at > pg_catalog.clock_timestamp() AS live, \
                c.checkpoint_phase, c.checkpoint_data FROM {call} AS c"
    )
}

/// A claim whose fence is kept in the session variable `my.<name>`.
fn claim_into(name: &str, call: &str) -> String {
    format!(
        "SELECT c.outcome, c.attempt, c.checkpoint_phase, \
                pg_catalog.set_config('my.{name}', COALESCE(c.fence::text, '0'), false) IS NOT NULL \
         FROM {call} AS c"
    )
}

/// A step that must fail.
fn fails(sql: &str) -> String {
    format!("{FAILS}{sql}")
}

fn fence(name: &str) -> String {
    format!("pg_catalog.current_setting('my.{name}')::bigint")
}

/// Every argument check of the functions both editions have, in the order each checks them.
const ARGUMENT_ERRORS: &[&str] = &[
    "SELECT idem_claim(NULL, 'k', 'h')",
    "SELECT idem_claim('t', NULL, 'h')",
    "SELECT idem_claim('', 'k', 'h')",
    "SELECT idem_claim('t', pg_catalog.repeat('x', 256), 'h')",
    "SELECT idem_claim('t', 'k', NULL)",
    "SELECT idem_claim('t', 'k', pg_catalog.repeat('h', 513))",
    "SELECT idem_claim('t', 'k', 'h', lease => '-1 second')",
    "SELECT idem_claim('t', 'k', 'h', lease => '0')",
    "SELECT idem_claim('t', 'k', 'h', ttl => '101 years')",
    "SELECT idem_claim('t', 'k', 'h', ttl => '1 mon -31 days')",
    "SELECT idem_complete('t', 'k', NULL, 200)",
    "SELECT idem_complete(NULL, 'k', 1, 200)",
    "SELECT idem_complete('t', 'never', 1, 200)",
    "SELECT idem_complete('t', 'k', 1, 200, pg_catalog.jsonb_build_object('x', pg_catalog.repeat('a', 1100000)))",
    "SELECT idem_fail_final('t', 'never', 1, 500)",
    "SELECT idem_release('t', 'never', 1)",
    "SELECT idem_release('t', 'never', NULL)",
    "SELECT idem_heartbeat('t', 'never', 1)",
    "SELECT idem_heartbeat('t', 'never', 1, '-5 minutes')",
    "SELECT idem_forget('t', NULL)",
    "SELECT idem_purge(-1)",
    "SELECT idem_consume('t', NULL)",
    "SELECT idem_consume('t', 'k', '0 seconds')",
    "SELECT * FROM idem_consume_many('t', NULL)",
    "SELECT * FROM idem_consume_many('t', ARRAY['a', NULL])",
    "SELECT * FROM idem_consume_many('t', ARRAY['a', ''])",
    "SELECT * FROM idem_consume_many(NULL, ARRAY['a'])",
    "SELECT idem_checkpoint('t', 'never', 1, NULL)",
    "SELECT idem_checkpoint('t', 'never', 1, pg_catalog.repeat('p', 257))",
    "SELECT idem_checkpoint('t', 'never', 1, 'charged')",
    "SELECT idem_assert_fence('t', 'never', 1)",
    "SELECT idem_downstream_key('t', 'k', NULL)",
    "SELECT idem_downstream_key('t', 'k', pg_catalog.repeat('s', 257))",
    "SELECT idem_downstream_key('t', '', 'charge')",
    "SELECT * FROM idem_claim_many('t', NULL, ARRAY['h'])",
    "SELECT * FROM idem_claim_many('t', ARRAY['k'], NULL)",
    "SELECT * FROM idem_claim_many('t', ARRAY['k'], ARRAY['h', 'h'])",
    "SELECT * FROM idem_claim_many('t', ARRAY['k', NULL], ARRAY['h', 'h'])",
    "SELECT * FROM idem_claim_many('t', ARRAY['k', 'k2'], ARRAY['h', NULL])",
    "SELECT * FROM idem_claim_many('t', ARRAY['k', ''], ARRAY['h', 'h'])",
    "SELECT * FROM idem_claim_many('t', ARRAY['k'], ARRAY['h'], lease => '-1 s')",
    "SELECT * FROM idem_claim_many('', ARRAY['k'], ARRAY['h'])",
    "SELECT * FROM idem_complete_many('t', NULL, ARRAY[1], ARRAY[200])",
    "SELECT * FROM idem_complete_many('t', ARRAY['k'], NULL, ARRAY[200])",
    "SELECT * FROM idem_complete_many('t', ARRAY['k'], ARRAY[1], NULL)",
    "SELECT * FROM idem_complete_many('t', ARRAY['k'], ARRAY[1, 2], ARRAY[200])",
    "SELECT * FROM idem_complete_many('t', ARRAY['k'], ARRAY[1], ARRAY[200, 201])",
    "SELECT * FROM idem_complete_many('t', ARRAY['k'], ARRAY[1], ARRAY[200], ARRAY[NULL, NULL]::jsonb[])",
    "SELECT * FROM idem_complete_many('t', ARRAY['k'], ARRAY[NULL]::bigint[], ARRAY[200])",
    "SELECT * FROM idem_complete_many('t', ARRAY['never'], ARRAY[1], ARRAY[200])",
    "SELECT * FROM idem_claim_seq('t', 's', NULL)",
    "SELECT * FROM idem_claim_seq('t', NULL, 1)",
    "SELECT idem_watermark(NULL, 's')",
    "SELECT idem_reset_watermark('t', '', 1)",
    "SELECT idem_reset_watermark('t', 's', NULL)",
    "SELECT idem_request_hash(NULL::text, '/p', '{}')",
    "SELECT idem_request_hash('POST', NULL, '{}')",
];

/// The argument checks of the functions only pg_idem's administrator may call (run by
/// [`Target::granter`]).
const GRANT_ARGUMENT_ERRORS: &[&str] = &[
    "SELECT idem_grant_tenant(NULL, 't')",
    // a role of OID 0 is no role (regrole's '-'), refused as a missing one
    "SELECT idem_grant_tenant(0::oid::regrole, 't')",
    "SELECT idem_grant_tenant('-'::regrole, 't')",
    "SELECT idem_revoke_tenant(0::oid::regrole, 't')",
    "SELECT idem_revoke_tenant(NULL, 't')",
    "SELECT idem_grant_tenant('app_user', '')",
    "SELECT idem_grant_tenant('app_user', NULL)",
    "SELECT idem_revoke_tenant('app_user', pg_catalog.repeat('x', 256))",
];

/// The life of keys: claims, replays, mismatches, leases and takeovers, fences refused,
/// checkpoints, releases, forgets, consumed messages and their takeovers, expiry and the purge.
fn lifecycle() -> Vec<(usize, String)> {
    let mut steps: Vec<(usize, String)> = vec![
        (0, "BEGIN".into()),
        (0, claim_into("f1", "idem_claim('t', 'k1', 'h')")),
        // the claim is not committed: the other session is told in_progress, and nothing more
        (1, claim("idem_claim('t', 'k1', 'h')")),
        (0, "COMMIT".into()),
        (1, claim("idem_claim('t', 'k1', 'h')")),
        (1, claim("idem_claim('t', 'k1', 'other')")),
        (1, fails("SELECT idem_consume('t', 'k1')")),
        (1, fails("SELECT idem_complete('t', 'k1', 424242, 200)")),
        (0, format!("SELECT idem_complete('t', 'k1', {}, 201, '{{\"id\": 7}}') > pg_catalog.clock_timestamp() + '23 hours'", fence("f1"))),
        (1, claim("idem_claim('t', 'k1', 'h')")),
        (1, claim("idem_claim('t', 'k1', 'other')")),
        (1, fails(&format!("SELECT idem_complete('t', 'k1', {}, 200)", fence("f1")))),
        (1, fails(&format!("SELECT idem_heartbeat('t', 'k1', {})", fence("f1")))),
        (1, "SELECT idem_consume('t', 'k1')".into()),
        // a final error
        (0, claim_into("f2", "idem_claim('t', 'k2', 'h', ttl => '2 hours')")),
        (0, format!("SELECT idem_fail_final('t', 'k2', {}, 422) < pg_catalog.clock_timestamp() + '3 hours'", fence("f2"))),
        (1, claim("idem_claim('t', 'k2', 'h')")),
        (1, fails(&format!("SELECT idem_release('t', 'k2', {})", fence("f2")))),
        // a heartbeat extends the lease and never shortens the key's life
        (0, claim_into("f3", "idem_claim('t', 'k3', 'h', lease => '1 second')")),
        (0, format!("SELECT idem_heartbeat('t', 'k3', {}, '1 hour') > pg_catalog.clock_timestamp() + '59 minutes'", fence("f3"))),
        (1, claim("idem_claim('t', 'k3', 'h')")),
        // a checkpoint is handed on to the attempt that takes over after the lease passed
        (0, claim_into("f4", "idem_claim('t', 'k4', 'h', lease => '50 milliseconds')")),
        (0, format!("SELECT idem_checkpoint('t', 'k4', {}, 'charged', '{{\"charge\": \"ch_1\"}}')", fence("f4"))),
        (0, "SELECT pg_catalog.pg_sleep(0.2)".into()),
        (1, claim("idem_claim('t', 'k4', 'h')")),
        (0, fails(&format!("SELECT idem_complete('t', 'k4', {}, 200)", fence("f4")))),
        (0, fails(&format!("SELECT idem_checkpoint('t', 'k4', {}, 'late')", fence("f4")))),
        (0, fails(&format!("SELECT idem_assert_fence('t', 'k4', {})", fence("f4")))),
        // a release gives the key up: the next claim is a fresh first attempt
        (0, claim_into("f5", "idem_claim('t', 'k5', 'h')")),
        (0, format!("SELECT idem_assert_fence('t', 'k5', {})", fence("f5"))),
        (0, format!("SELECT idem_release('t', 'k5', {})", fence("f5"))),
        (0, fails(&format!("SELECT idem_release('t', 'k5', {})", fence("f5")))),
        (1, claim("idem_claim('t', 'k5', 'h')")),
        (1, "SELECT idem_forget('t', 'k5')".into()),
        (1, "SELECT idem_forget('t', 'k5')".into()),
        // consumed messages
        (0, "SELECT idem_consume('t', 'm1')".into()),
        (1, "SELECT idem_consume('t', 'm1')".into()),
        (1, claim("idem_claim('t', 'm1', '')")),
        (1, claim("idem_claim('t', 'm1', 'h')")),
        (1, "SELECT * FROM idem_consume_many('t', ARRAY['a', 'b', 'a', 'm1', 'c'])".into()),
        (1, "SELECT * FROM idem_consume_many('t', ARRAY['c', 'd'])".into()),
        // every key new and each once; then new keys beside repeats and a processed one
        (1, "SELECT * FROM idem_consume_many('t', ARRAY['bn1', 'bn2', 'bn3'])".into()),
        (1, "SELECT * FROM idem_consume_many('t', ARRAY['bn4', 'bn1', 'bn4', 'bn5', 'bn5'])".into()),
        // a message whose ttl passed is new again, in a batch of new ones
        (1, "SELECT * FROM idem_consume_many('t', ARRAY['be1', 'be2'], '1 millisecond')".into()),
        (1, "SELECT pg_catalog.pg_sleep(0.05)".into()),
        (1, "SELECT * FROM idem_consume_many('t', ARRAY['be3', 'be1', 'be4'])".into()),
        // in a transaction that claimed one of them: its own attempt, refused (idem_consume's
        // rule) after a new key of the same batch
        (0, "BEGIN".into()),
        (0, claim("idem_claim('t', 'bown', 'h')")),
        (0, fails("SELECT * FROM idem_consume_many('t', ARRAY['bo1', 'bown', 'bo2'])")),
        (0, "ROLLBACK".into()),
        (1, "SELECT * FROM idem_consume_many('t', ARRAY['bown', 'bo1'])".into()),
        // a consume takes over an attempt of idem_claim whose lease passed
        (0, claim_into("f7", "idem_claim('t', 'k7', 'h', lease => '50 milliseconds')")),
        (0, "SELECT pg_catalog.pg_sleep(0.2)".into()),
        (1, "SELECT idem_consume('t', 'k7')".into()),
        (1, claim("idem_claim('t', 'k7', '')")),
        (0, fails(&format!("SELECT idem_complete('t', 'k7', {}, 200)", fence("f7")))),
        // this transaction's own attempt stays its own
        (0, "BEGIN".into()),
        (0, claim("idem_claim('t', 'k8', 'h', lease => '1 millisecond')")),
        (0, "SELECT pg_catalog.pg_sleep(0.05)".into()),
        (0, claim("idem_claim('t', 'k8', 'h')")),
        (0, fails("SELECT idem_consume('t', 'k8')")),
        (0, "ROLLBACK".into()),
        // expiry: an expired key is absent to claims and consumes, and purged
        (0, "SELECT idem_consume('t', 'e1', '10 milliseconds'), idem_consume('t', 'e2', '10 milliseconds')".into()),
        (0, claim_into("e3", "idem_claim('t', 'e3', 'h', lease => '1 millisecond', ttl => '10 milliseconds')")),
        (0, format!("SELECT idem_complete('t', 'e3', {}, 200) IS NOT NULL", fence("e3"))),
        (0, claim_into("e4", "idem_claim('t', 'e4', 'h', lease => '1 hour', ttl => '10 milliseconds')")),
        (0, "SELECT pg_catalog.pg_sleep(0.1)".into()),
        (1, "SELECT idem_consume('t', 'e1')".into()),
        (1, claim("idem_claim('t', 'e3', 'h')")),
        (1, claim("idem_claim('t', 'e4', 'h')")),
        // e2 goes; e1 and e3 were taken again; e4 is leased
        (1, "SELECT idem_purge()".into()),
        (1, "SELECT idem_purge(0)".into()),
        // batches: in input order, a key repeated meets its own earlier claim; all or nothing
        (1, "SELECT c.key, c.outcome, c.fence IS NOT NULL, c.attempt FROM idem_claim_many('t', ARRAY['b1', 'b2', 'b1', 'k1'], ARRAY['h', 'h', 'x', 'h']) AS c".into()),
        (0, "SELECT pg_catalog.set_config('my.bf', pg_catalog.array_agg(c.fence ORDER BY c.key)::text, false) IS NOT NULL FROM idem_claim_many('t', ARRAY['b3', 'b4'], ARRAY['h', 'h']) AS c".into()),
        (0, fails("SELECT * FROM idem_complete_many('t', ARRAY['b3', 'b4'], ARRAY[1, 2], ARRAY[200, 201])")),
        (1, claim("idem_claim('t', 'b3', 'h')")),
        (0, "SELECT c.key, c.expires_at > pg_catalog.clock_timestamp() FROM idem_complete_many('t', ARRAY['b3', 'b4'], pg_catalog.current_setting('my.bf')::bigint[], ARRAY[200, NULL], ARRAY['{\"a\": 1}'::jsonb, NULL]) AS c".into()),
        (1, claim("idem_claim('t', 'b3', 'h')")),
        (1, claim("idem_claim('t', 'b4', 'h')")),
        (1, "SELECT * FROM idem_claim_many('t', '{}', '{}')".into()),
        // ordered streams
        (0, "BEGIN".into()),
        (0, "SELECT * FROM idem_claim_seq('t', 's1', 5)".into()),
        (1, "SELECT idem_watermark('t', 's1')".into()),
        (0, "COMMIT".into()),
        (1, "SELECT * FROM idem_claim_seq('t', 's1', 5)".into()),
        (1, "SELECT * FROM idem_claim_seq('t', 's1', 4)".into()),
        (1, "SELECT * FROM idem_claim_seq('t', 's1', 9)".into()),
        (1, "SELECT idem_reset_watermark('t', 's1', 2)".into()),
        (1, "SELECT idem_watermark('t', 's1')".into()),
        (1, "SELECT idem_reset_watermark('t', 's2', 2)".into()),
        (1, "SELECT idem_watermark('t', 's2'), idem_watermark('t', 'none')".into()),
        // fingerprints and keys
        (1, "SELECT idem_request_hash('{\"b\": [1.50, 2E2, -0], \"a\": {\"é\": \"x\\ny\"}}')".into()),
        (1, "SELECT idem_request_hash('post', '/v1/charges', NULL), idem_request_hash(NULL::jsonb)".into()),
        (1, "SELECT idem_downstream_key('t', 'k1', 'charge')".into()),
        (1, "SELECT pg_catalog.substr(idem_new_key()::text, 15, 1), pg_catalog.substr(idem_new_key()::text, 20, 1) IN ('8', '9', 'a', 'b')".into()),
    ];
    steps.extend(ARGUMENT_ERRORS.iter().map(|sql| (1, fails(sql))));
    steps
}

fn as_refs(steps: &[(usize, String)]) -> Vec<(usize, &str)> {
    steps.iter().map(|(s, sql)| (*s, sql.as_str())).collect()
}

/// Tenants as an access boundary: a role acts only on the tenants granted to it.
fn tenant_boundary(targets: &[Target]) {
    for target in targets {
        target.tenant_grants_on();
        let mut granter = target.granter();
        granter
            .batch_execute(&format!("SELECT idem_grant_tenant('{USER}', 'mine')"))
            .expect("grant");
    }
    let steps = [
        (0, claim("idem_claim('mine', 'k', 'h')")),
        (0, fails(&claim("idem_claim('theirs', 'k', 'h')"))),
        (0, fails("SELECT idem_consume('theirs', 'm')")),
        (0, fails("SELECT idem_forget('theirs', 'k')")),
        (0, fails("SELECT idem_complete('theirs', 'k', 1, 200)")),
        (
            0,
            fails("SELECT * FROM idem_consume_many('theirs', ARRAY['m'])"),
        ),
        (0, fails("SELECT idem_grant_tenant('app_user', 'theirs')")),
        (0, "SELECT idem_purge()".to_string()),
    ];
    conform(targets, USER, &as_refs(&steps));
    // the administrator's calls: the same errors for the same bad arguments
    let answers: Vec<Vec<Answer>> = targets
        .iter()
        .map(|target| {
            let mut granter = target.granter();
            GRANT_ARGUMENT_ERRORS
                .iter()
                .map(|sql| run_step(&mut granter, sql))
                .collect()
        })
        .collect();
    for (i, sql) in GRANT_ARGUMENT_ERRORS.iter().enumerate() {
        assert!(
            matches!(answers[0][i], Answer::Error { .. }),
            "{}: {sql}: {:?}",
            targets[0].name(),
            answers[0][i]
        );
        for (target, theirs) in targets.iter().zip(&answers).skip(1) {
            assert_eq!(theirs[i], answers[0][i], "{} differs: {sql}", target.name());
        }
    }
}

/// The calls an application makes answer alike in both editions (plain install).
#[test]
fn the_plain_sql_edition_answers_as_the_native_one() {
    let targets = [Target::native(), Target::plain()];
    let answers = conform(&targets, USER, &as_refs(&lifecycle()));
    // the comparison is only worth something if the calls did what they should
    let rows = |i: usize| match &answers[i] {
        Answer::Rows(rows) => rows.clone(),
        Answer::Error { code, message, .. } => panic!("step {i}: {code} {message}"),
    };
    assert_eq!(rows(1)[0][0].as_deref(), Some("claimed"));
    assert_eq!(rows(2)[0][0].as_deref(), Some("in_progress"));
    tenant_boundary(&targets);
}

/// The statistics and operator functions answer as the native edition does without its library
/// preloaded: the keys by state, no counters, no purge worker.
#[test]
fn statistics_answer_as_the_native_edition_without_preload() {
    let targets = [Target::native_not_preloaded(), Target::plain()];
    for target in &targets {
        let (Target::Native(server) | Target::Plain(server)) = target else {
            unreachable!()
        };
        server
            .client()
            .batch_execute(&format!("GRANT pg_monitor TO {USER}"))
            .expect("grant pg_monitor");
    }
    let steps = [
        (0, claim("idem_claim('t1', 'k1', 'h', lease => '1 millisecond')")),
        (0, claim("idem_claim('t1', 'k2', 'h')")),
        (0, claim("idem_claim('t2', 'k3', 'h', ttl => '1 millisecond')")),
        (0, "SELECT idem_consume('t2', 'm1'), idem_consume('t2', 'm2', '1 millisecond')".to_string()),
        (0, "SELECT pg_catalog.pg_sleep(0.05)".to_string()),
        (0, "SELECT s.keys_in_progress, s.keys_completed, s.keys_failed, s.keys_stalled, s.keys_expired, \
                    s.oldest_in_progress_at IS NOT NULL, s.claims, s.replays_completed, s.consumed, \
                    s.keys_purged, s.counters_since, s.purge_last_pass_at, s.purge_total_keys, \
                    s.counters_nodes, s.counters_missing_nodes FROM idem_stats() AS s".to_string()),
        (0, "SELECT s.tenant, s.keys_in_progress, s.keys_completed, s.keys_stalled, s.keys_expired, \
                    s.oldest_in_progress_at IS NOT NULL, s.claims, s.consumed FROM idem_tenant_stats() AS s".to_string()),
        (0, "SELECT * FROM idem_counters()".to_string()),
        (0, "SELECT * FROM idem_tenant_counters()".to_string()),
        (0, fails("SELECT idem_stats_reset()")),
        (0, "SELECT * FROM idem_purge_status()".to_string()),
        (0, fails("SELECT s.tenant, s.key, s.attempt FROM idem_stalled() AS s")),
        (0, "SELECT idem_purge()".to_string()),
    ];
    conform(&targets, USER, &as_refs(&steps));
}

/// The same through pg_tle on a managed-style server of the same PostgreSQL version: installed
/// and used with no superuser.
#[test]
fn the_sql_edition_through_pg_tle_answers_as_the_native_one() {
    let Some(tle) = Target::tle(pg_idem_tests::major()) else {
        return;
    };
    let targets = [Target::native(), tle];
    conform(&targets, USER, &as_refs(&lifecycle()));
    tenant_boundary(&targets);
}
