//! Hostile and careless input on a shared server: nothing crashes the server, no role gains
//! rights through pg_idem, only UTF8 databases are accepted, every long call can be cancelled,
//! refused fences leak nothing, the edges of the contract hold, and large inputs stay within
//! PostgreSQL's memory accounting.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use pg_idem_tests::*;

/// A connection as `role` to database `db`.
fn connect(server: &Server, role: &str, db: &str) -> Client {
    let conninfo = format!(
        "host=127.0.0.1 port={} user={role} dbname={db} connect_timeout=10 options='-c statement_timeout=60s'",
        server.port
    );
    Client::connect(&conninfo, NoTls).unwrap_or_else(|e| panic!("connect as {role} to {db}: {e}"))
}

fn checkpointer_pid(db: &mut Client) -> i32 {
    db.query_one(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'",
        &[],
    )
    .expect("the checkpointer")
    .get(0)
}

/// Runs `f` and fails if the server went through crash recovery meanwhile: the checkpointer is
/// a new process after one (pg_postmaster_start_time() does not change), and the log says which
/// process died.
fn without_crash<R>(server: &Server, f: impl FnOnce() -> R) -> R {
    let before = checkpointer_pid(&mut server.client());
    let result = f();
    let log = server.log();
    let crashed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("terminated by signal") || l.contains("was terminated by"))
        .collect();
    let mut db = server.client();
    assert!(
        crashed.is_empty(),
        "a server process crashed:\n{}",
        crashed.join("\n")
    );
    assert_eq!(
        checkpointer_pid(&mut db),
        before,
        "the server went through crash recovery"
    );
    result
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn is_hash(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Either a hash or one of the SQLSTATEs allowed.
fn hash_or(result: Result<postgres::Row, postgres::Error>, allowed: &[&str]) -> String {
    match result {
        Ok(row) => {
            let hash: String = row.get(0);
            assert!(is_hash(&hash), "not a hash: {hash}");
            "hash".to_string()
        }
        Err(e) => {
            let code = sqlstate(&e);
            assert!(
                allowed.contains(&code.as_str()),
                "unexpected error {code}: {e}"
            );
            code
        }
    }
}

#[test]
fn deep_json_fails_cleanly_instead_of_crashing_the_server() {
    // the server's setting (superuser-only for a role or a session), not the 2MB default
    let server = Server::start(&["max_stack_depth = '7MB'"]);
    server
        .client()
        .batch_execute("CREATE ROLE app LOGIN")
        .unwrap();
    without_crash(&server, || {
        let mut app = server.client_as("app");
        let deep = "(repeat('[', 40000) || repeat(']', 40000))::jsonb";
        hash_or(
            app.query_one(&format!("SELECT idem_request_hash({deep})"), &[]),
            &["54001"],
        );
        hash_or(
            app.query_one(
                &format!("SELECT idem_request_hash('POST', '/x', {deep})"),
                &[],
            ),
            &["54001"],
        );
        let objects = "(repeat('{\"a\":', 30000) || '1' || repeat('}', 30000))::jsonb";
        hash_or(
            app.query_one(&format!("SELECT idem_request_hash({objects})"), &[]),
            &["54001"],
        );
        // the DBA's session, at the server's max_stack_depth of 7MB too
        let mut admin = server.client();
        hash_or(
            admin.query_one(
                "SELECT idem_request_hash((repeat('[', 200000) || repeat(']', 200000))::jsonb)",
                &[],
            ),
            &["54001"],
        );
        // and a depth well within the limit still hashes
        let ok = app
            .query_one(
                "SELECT idem_request_hash((repeat('[', 1000) || repeat(']', 1000))::jsonb)",
                &[],
            )
            .unwrap();
        assert!(is_hash(&ok.get::<_, String>(0)));
    });
}

/// A NOSUPERUSER role that owns the extension's schema (the database owner owns `public` from
/// PostgreSQL 15 on; here a schema of its own, the same on every version) renames it and plants
/// look-alikes of the functions the SECURITY DEFINER statistics call; a role with CREATE on the
/// schema plants an overload.
#[test]
fn statistics_functions_resolve_no_name_at_call_time() {
    if native_only(
        "CREATE EXTENSION pg_idem SCHEMA, and the shared-memory counters the look-alikes \
         imitate (the plain SQL edition installs into public and counts nothing)",
    ) {
        return;
    }
    let server = Server::start_bare(&["shared_preload_libraries = 'pg_idem'"]);
    server
        .client()
        .batch_execute(
            "CREATE ROLE evil LOGIN NOSUPERUSER; CREATE ROLE monitor LOGIN; GRANT pg_monitor TO monitor; \
             CREATE ROLE planter LOGIN",
        )
        .unwrap();
    server
        .client()
        .batch_execute("CREATE DATABASE d OWNER evil")
        .unwrap();
    let mut admin = server.client_db("d");
    admin
        .batch_execute(
            "CREATE SCHEMA shared AUTHORIZATION evil; CREATE EXTENSION pg_idem SCHEMA shared; \
             SELECT shared.idem_claim('t', 'k', 'h')",
        )
        .unwrap();
    let mut evil = connect(&server, "evil", "d");
    evil.batch_execute(
        "ALTER SCHEMA shared RENAME TO old_public; CREATE SCHEMA shared; \
         CREATE FUNCTION shared.idem_counters(OUT claims bigint, OUT replays_completed bigint, \
             OUT replays_failed bigint, OUT in_progress bigint, OUT mismatches bigint, \
             OUT takeovers bigint, OUT stale_fences bigint, OUT stale_keys bigint, \
             OUT keys_purged bigint, OUT since timestamptz) RETURNS SETOF record \
             LANGUAGE plpgsql AS $$ BEGIN ALTER ROLE evil SUPERUSER; RETURN; END $$; \
         CREATE FUNCTION shared.idem_tenant_counters(OUT tenant text, OUT claims bigint, \
             OUT replays_completed bigint, OUT replays_failed bigint, OUT in_progress bigint, \
             OUT mismatches bigint, OUT takeovers bigint, OUT stale_fences bigint, OUT stale_keys bigint) \
             RETURNS SETOF record LANGUAGE plpgsql AS $$ BEGIN ALTER ROLE evil SUPERUSER; RETURN; END $$; \
         CREATE FUNCTION shared.idem_purge_status(OUT database text, OUT pid integer, OUT state text, \
             OUT started_at timestamptz, OUT starts bigint, OUT last_pass_at timestamptz, \
             OUT last_pass_keys bigint, OUT last_pass_batches bigint, OUT last_pass_ms bigint, \
             OUT total_keys bigint, OUT total_passes bigint, OUT total_batches bigint) RETURNS SETOF record \
             LANGUAGE plpgsql AS $$ BEGIN ALTER ROLE evil SUPERUSER; RETURN; END $$; \
         GRANT USAGE ON SCHEMA old_public TO PUBLIC; GRANT CREATE ON SCHEMA old_public TO planter",
    )
    .unwrap();
    // a role with only CREATE on the extension's schema plants an overload
    let mut planter = connect(&server, "planter", "d");
    planter
        .batch_execute(
            "CREATE FUNCTION old_public.idem_counters(n int DEFAULT 0) RETURNS int LANGUAGE sql AS 'SELECT 1'",
        )
        .unwrap();
    for role in ["monitor", "postgres"] {
        let mut db = connect(&server, role, "d");
        let claims: i64 = db
            .query_one("SELECT claims FROM old_public.idem_stats()", &[])
            .unwrap_or_else(|e| panic!("idem_stats() as {role}: {e}"))
            .get(0);
        assert!(claims >= 1, "the real counters, not a look-alike's");
        let tenants: i64 = db
            .query_one(
                "SELECT count(*) FROM old_public.idem_tenant_stats() WHERE tenant = 't'",
                &[],
            )
            .unwrap_or_else(|e| panic!("idem_tenant_stats() as {role}: {e}"))
            .get(0);
        assert_eq!(tenants, 1);
    }
    admin
        .query("SELECT * FROM old_public.idem_stalled()", &[])
        .expect("idem_stalled()");
    let superuser: bool = server
        .client()
        .query_one("SELECT rolsuper FROM pg_roles WHERE rolname = 'evil'", &[])
        .unwrap()
        .get(0);
    assert!(
        !superuser,
        "the database owner became superuser through idem_stats()"
    );
}

#[test]
fn only_utf8_databases_are_accepted() {
    let server = Server::start(&[]);
    let mut db = server.client();
    for encoding in ["LATIN1", "SQL_ASCII"] {
        let name = format!("db_{}", encoding.to_lowercase());
        db.batch_execute(&format!(
            "CREATE DATABASE {name} TEMPLATE template0 ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C'"
        ))
        .unwrap();
        let err = try_install_pg_idem(&mut server.client_db(&name))
            .expect_err("pg_idem in a non-UTF8 database");
        let e = err.as_db_error().expect("a server error");
        assert_eq!(e.code().code(), "0A000");
        assert_eq!(
            e.message(),
            "pg_idem requires a database with encoding UTF8"
        );
        let detail = e.detail().unwrap_or_default();
        assert!(
            detail.contains(&name) && detail.contains(encoding),
            "detail: {detail}"
        );
        assert!(e.hint().is_some_and(|h| h.contains("UTF8")));
    }
    // in UTF8, accented requests and keys are told apart exactly
    let differ: bool = db
        .query_one(
            "SELECT idem_request_hash(jsonb_build_object('n', 'Jos' || chr(233))) \
                 <> idem_request_hash(jsonb_build_object('n', 'Jos' || chr(232)))",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(differ);
    let one = claim(&mut db, "t", "café", "h");
    let two = claim(&mut db, "t", "cafè", "h");
    assert_eq!(
        (one.outcome.as_str(), two.outcome.as_str()),
        ("claimed", "claimed")
    );
    let key = "ключ-𝄞-😀";
    let c = claim(&mut db, "𝕥", key, "h");
    complete(&mut db, "𝕥", key, c.fence.unwrap(), 200, r#"{"body": "𝄞"}"#);
    let replay = claim(&mut db, "𝕥", key, "h");
    assert_eq!(replay.outcome, "completed");
    assert_eq!(replay.response_body.as_deref(), Some(r#"{"body": "𝄞"}"#));
}

#[test]
fn request_hash_is_linear_and_cancellable() {
    let server = Server::start(&[]);
    let mut db = server.client();
    db.batch_execute("SET statement_timeout = '2s'").unwrap();
    let wide = db.query_one(
        "SELECT idem_request_hash(jsonb_object_agg(g::text, g)) FROM generate_series(1, 50000) AS g",
        &[],
    );
    assert!(is_hash(
        &wide
            .expect("50,000 members well within 2 s")
            .get::<_, String>(0)
    ));

    db.batch_execute(
        "SET statement_timeout = 0; \
         CREATE TABLE big AS SELECT jsonb_object_agg(g::text, g) AS j FROM generate_series(1, 2000000) AS g",
    )
    .unwrap();
    without_crash(&server, || {
        db.batch_execute("SET statement_timeout = '100ms'").unwrap();
        let t0 = Instant::now();
        let outcome = hash_or(
            db.query_one("SELECT idem_request_hash(j) FROM big", &[]),
            &["57014"],
        );
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "{outcome} after {:?}",
            t0.elapsed()
        );

        // pg_terminate_backend ends a running call
        let mut victim = server.client();
        let pid: i32 = victim
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        let running = thread::spawn(move || {
            let t0 = Instant::now();
            let r = victim.query_one(
                "SELECT idem_request_hash(j) FROM big, generate_series(1, 20)",
                &[],
            );
            (r.map(|_| ()), t0.elapsed())
        });
        thread::sleep(Duration::from_millis(300));
        let mut admin = server.client();
        let terminated: bool = admin
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .unwrap()
            .get(0);
        assert!(terminated);
        let (result, elapsed) = running.join().unwrap();
        assert!(result.is_err(), "the terminated session got an error");
        assert!(
            elapsed < Duration::from_secs(3),
            "terminated after {elapsed:?}"
        );
    });
}

/// Every refusal of a fence reads the same whether the guess was below or above the key's
/// fence, so a caller cannot find a live fence by bisection.
#[test]
fn refused_fences_give_no_direction() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let f = claim_with(&mut db, "t", "k", "h", "10 minutes", None)
        .fence
        .unwrap();
    let refusal = |db: &mut Client, call: &str, fence: i64| -> (String, String, String, String) {
        let err = db
            .query_one(&call.replace("$F", &fence.to_string()), &[])
            .expect_err("a wrong fence is refused");
        let e = err.as_db_error().expect("a server error");
        let hide = |s: &str| s.replace(&fence.to_string(), "N");
        (
            e.code().code().to_string(),
            hide(e.message()),
            hide(e.detail().unwrap_or_default()),
            hide(e.hint().unwrap_or_default()),
        )
    };
    for call in [
        "SELECT idem_complete('t', 'k', $F, 200)",
        "SELECT idem_fail_final('t', 'k', $F, 500)",
        "SELECT idem_heartbeat('t', 'k', $F)",
        "SELECT idem_checkpoint('t', 'k', $F, 'p')",
        "SELECT idem_assert_fence('t', 'k', $F)",
        "SELECT idem_release('t', 'k', $F)",
    ] {
        let below = refusal(&mut db, call, f - 1);
        assert_eq!(below.0, "55000", "{call}");
        assert_eq!(
            refusal(&mut db, call, f + 1),
            below,
            "{call}: above vs below"
        );
        assert_eq!(
            refusal(&mut db, call, f + 1000),
            below,
            "{call}: far above vs below"
        );
    }
    // after a takeover: the old fence (below) and a guess above read the same
    let s = claim_with(&mut db, "t", "s", "h", "200 ms", None)
        .fence
        .unwrap();
    thread::sleep(Duration::from_millis(300));
    let taken = claim(&mut server.client(), "t", "s", "h").fence.unwrap();
    let call = "SELECT idem_complete('t', 's', $F, 200)";
    assert_eq!(refusal(&mut db, call, s), refusal(&mut db, call, taken + 1));
}

#[test]
fn a_transaction_never_takes_over_its_own_claim() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let mut tx = db.transaction().unwrap();
    let first = claim_with(&mut tx, "t", "k", "h", "1 second", None);
    assert_eq!(first.outcome, "claimed");
    tx.batch_execute("SELECT pg_sleep(1.5)").unwrap();
    let again = claim(&mut tx, "t", "k", "h");
    assert_eq!(
        (again.outcome.as_str(), again.fence, again.attempt),
        ("in_progress", None, Some(1)),
        "the transaction's own claim, past its lease"
    );
    complete(&mut tx, "t", "k", first.fence.unwrap(), 200, "{}");
    tx.commit().unwrap();
    assert_eq!(claim(&mut db, "t", "k", "h").outcome, "completed");
}

#[test]
fn lease_and_ttl_stop_at_100_years_as_intervals_count_them() {
    let server = Server::start(&[]);
    let mut db = server.client();
    for (i, too_long) in [
        "101 years",
        "100 years 11 months",
        "100 years 1 day",
        "36500 days",
    ]
    .iter()
    .enumerate()
    {
        for argument in ["lease", "ttl"] {
            let (lease, ttl) = if argument == "lease" {
                (Some(*too_long), None)
            } else {
                (None, Some(*too_long))
            };
            let err = try_claim(&mut db, "t", &format!("k{i}{argument}"), "h", lease, ttl)
                .expect_err("over 100 years");
            let e = err.as_db_error().unwrap();
            assert_eq!(e.code().code(), "22023", "{argument} {too_long}");
            assert_eq!(e.message(), format!("argument \"{argument}\" is too long"));
        }
    }
    for (i, ok) in ["100 years", "36000 days"].iter().enumerate() {
        let c = try_claim(&mut db, "t", &format!("ok{i}"), "h", Some(ok), Some(ok)).unwrap();
        assert_eq!(c.outcome, "claimed", "{ok}");
    }
}

#[test]
fn checkpoint_phases_and_downstream_steps_are_names() {
    let server = Server::start(&[]);
    let mut db = server.client();
    let f = claim(&mut db, "t", "k", "h").fence.unwrap();
    let err = db
        .execute(
            "SELECT idem_checkpoint('t', 'k', $1, repeat('x', 5000000))",
            &[&f],
        )
        .expect_err("a 5 MB phase");
    assert_eq!(sqlstate(&err), "22023");
    assert_eq!(
        err.as_db_error().unwrap().message(),
        "argument \"phase\" is too long"
    );
    db.execute(
        "SELECT idem_checkpoint('t', 'k', $1, repeat('x', 200))",
        &[&f],
    )
    .expect("a 200-character phase");
    let err = db
        .query_one(
            "SELECT idem_downstream_key('t', 'k', repeat('x', 5000000))",
            &[],
        )
        .expect_err("a 5 MB step");
    assert_eq!(sqlstate(&err), "22023");
    assert_eq!(
        err.as_db_error().unwrap().message(),
        "argument \"step\" is too long"
    );
}

/// The address space of one backend, limited from outside (prlimit, as root): a huge request
/// body must fail in that session with PostgreSQL's "out of memory", or be hashed, and never
/// abort the process (which restarts the whole server).
#[test]
fn huge_inputs_stay_within_postgresql_memory() {
    let server = Server::start(&[]);
    let mut db = server.client();
    db.batch_execute(
        "SET statement_timeout = 0; \
         CREATE TABLE body AS SELECT jsonb_agg(repeat(md5(g::text), 3) || g) AS j FROM generate_series(1, 600000) AS g",
    )
    .unwrap();
    let size: i64 = db
        .query_one("SELECT pg_column_size(j)::bigint FROM body", &[])
        .unwrap()
        .get(0);
    assert!(size > 10_000_000, "a large body ({size} bytes stored)");
    let pid: i32 = db.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let vm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let limit = (vm_kb + 250 * 1024) * 1024;
    // as the server's OS user: lowering another process's limits needs the same user (or
    // CAP_SYS_RESOURCE, which root may not have in a container)
    let mut prlimit = if running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", "prlimit"]);
        c
    } else {
        Command::new("prlimit")
    };
    let limited = prlimit
        .arg(format!("--pid={pid}"))
        .arg(format!("--as={limit}:{limit}"))
        .output();
    let ok = limited.as_ref().is_ok_and(|o| o.status.success());
    if vm_kb == 0 || !ok {
        skip_test(
            "prlimit",
            &format!(
                "cannot limit the backend's memory here (needs prlimit, and root or the server's \
                 OS user): VmSize {vm_kb} kB, {:?}",
                limited.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            ),
        );
        return;
    }
    without_crash(&server, || {
        let outcome = hash_or(
            db.query_one("SELECT idem_request_hash(j) FROM body", &[]),
            &["53200"],
        );
        let again = hash_or(
            db.query_one("SELECT idem_request_hash('POST', '/x', j) FROM body", &[]),
            &["53200"],
        );
        eprintln!(
            "under a {} MB address space: {outcome}, {again}",
            limit >> 20
        );
    });
    // batches are counted and checked before anything is copied
    let err = server
        .client()
        .query(
            "SELECT * FROM idem_claim_many('t', array_fill(repeat('k', 1000000), ARRAY[150]), array_fill('h'::text, ARRAY[150]))",
            &[],
        )
        .expect_err("keys of 1 MB");
    assert_eq!(sqlstate(&err), "22023");
}
