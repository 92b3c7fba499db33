//! Expired keys in the SQL edition, which has no purge worker: the calls purge in passing (a
//! bounded amount, never waiting), so the table stays bounded with nothing scheduled; and
//! idem_purge() scheduled with pg_cron, as every managed service offers it.

use std::path::Path;
use std::time::{Duration, Instant};

use pg_idem_tests::managed::{plain_server, ADMIN, USER};
use pg_idem_tests::{skip_test, wait_for, Client};

fn count_keys(admin: &mut Client) -> i64 {
    admin
        .query_one("SELECT count(*) FROM idem.keys", &[])
        .expect("count")
        .get(0)
}

/// `n` keys of tenant `tenant` that expired a minute ago, written directly as the owner: a
/// backlog nobody purged.
fn expired_backlog(admin: &mut Client, tenant: &str, n: i64) {
    admin
        .execute(
            "INSERT INTO idem.keys (tenant, key, state, purge_after)
             SELECT $1, 'old-' || i, 'c', now() - interval '1 minute' FROM generate_series(1, $2::bigint) AS i",
            &[&tenant, &n],
        )
        .expect("backlog");
}

/// Consumers and request handlers that add a key per call, with a ttl of a few milliseconds,
/// and nobody ever calling idem_purge(): the table does not grow with the calls.
#[test]
fn expired_keys_go_with_the_calls_alone() {
    let server = plain_server(&[]);
    let mut app = server.client_as(USER);
    let mut admin = server.client_as(ADMIN);
    let calls = 3000;
    for i in 0..calls {
        if i % 2 == 0 {
            app.execute(
                "SELECT idem_consume('t', $1, '1 millisecond')",
                &[&format!("m{i}")],
            )
            .expect("consume");
        } else {
            let fence: i64 = app
                .query_one(
                    "SELECT fence FROM idem_claim('t', $1, 'h', ttl => '1 millisecond')",
                    &[&format!("k{i}")],
                )
                .expect("claim")
                .get(0);
            app.execute(
                "SELECT idem_complete('t', $1, $2, 200)",
                &[&format!("k{i}"), &fence],
            )
            .expect("complete");
        }
    }
    let left = count_keys(&mut admin);
    // two expired keys go per call on average: what is left is a handful, not the 3000 added
    assert!(
        left < 300,
        "{left} keys left after {calls} calls that each added one"
    );
    pg_idem_tests::amcheck(&mut server.client());
}

/// No call pays for a backlog: with 20,000 expired keys waiting, a call deletes at most 16.
#[test]
fn no_call_pays_for_a_backlog() {
    let server = plain_server(&[]);
    let mut app = server.client_as(USER);
    let mut admin = server.client_as(ADMIN);
    expired_backlog(&mut admin, "other", 20_000);
    let mut before = count_keys(&mut admin);
    let mut purged_by_some_call = false;
    for i in 0..200 {
        app.execute("SELECT idem_consume('t', $1)", &[&format!("m{i}")])
            .expect("consume");
        let after = count_keys(&mut admin);
        // the call added its own key and deleted what it purged in passing
        let deleted = before + 1 - after;
        assert!(
            (0..=16).contains(&deleted),
            "one call deleted {deleted} expired keys"
        );
        purged_by_some_call |= deleted > 0;
        before = after;
    }
    assert!(purged_by_some_call, "200 calls purged nothing in passing");
}

/// Which calls purge in passing is drawn from the session's `random()`, so a seeded session
/// draws the same calls on every run (the harness seeds each connection: a suite's purges in
/// passing are the same on every run). Each drawn call deletes 16 expired keys; the others none.
#[test]
fn a_seeded_session_purges_in_passing_at_the_same_calls() {
    let server = plain_server(&[]);
    let mut admin = server.client_as(ADMIN);
    // more expired keys than the runs below can purge: each drawn call finds 16
    expired_backlog(&mut admin, "other", 4_000);
    let drawn_calls = |run: &str, seed: f64, admin: &mut Client| -> Vec<usize> {
        let mut app = server.client_as(USER);
        app.execute("SELECT pg_catalog.setseed($1)", &[&seed])
            .expect("setseed");
        let mut drawn = Vec::new();
        let mut before = count_keys(admin);
        for i in 0..64 {
            app.execute("SELECT idem_consume('t', $1)", &[&format!("{run}-{i}")])
                .expect("consume");
            let after = count_keys(admin);
            // the call's own message, less what it purged
            match after - before {
                1 => {}
                -15 => drawn.push(i),
                other => panic!("call {i} of run {run} changed the table by {other} keys"),
            }
            before = after;
        }
        drawn
    };
    let first = drawn_calls("a", 0.5, &mut admin);
    let again = drawn_calls("b", 0.5, &mut admin);
    let other_seed = drawn_calls("c", -0.5, &mut admin);
    assert!(!first.is_empty(), "64 calls drew no purge in passing");
    assert_eq!(first, again, "the same seed drew other calls");
    assert_ne!(first, other_seed, "another seed drew the same calls");
    pg_idem_tests::amcheck(&mut server.client());
}

/// An attempt in progress is never purged in passing: it may be the calling transaction's own,
/// which stays its own however long it runs past its lease and ttl.
#[test]
fn a_purge_in_passing_leaves_attempts_in_progress() {
    let server = plain_server(&[]);
    let mut app = server.client_as(USER);
    let mut tx = app.transaction().expect("begin");
    tx.query_one(
        "SELECT outcome FROM idem_claim('t', 'mine', 'h', lease => '1 millisecond', ttl => '1 millisecond')",
        &[],
    )
    .expect("claim");
    std::thread::sleep(Duration::from_millis(20));
    // enough writes that some purge in passing runs
    for i in 0..200 {
        tx.execute("SELECT idem_consume('t', $1)", &[&format!("m{i}")])
            .expect("consume");
    }
    let own: String = tx
        .query_one("SELECT outcome FROM idem_claim('t', 'mine', 'h')", &[])
        .expect("claim again")
        .get(0);
    assert_eq!(
        own, "in_progress",
        "the transaction's own attempt was purged"
    );
    tx.commit().expect("commit");
}

/// idem_purge() scheduled with pg_cron (Debian's postgresql-15-cron; RDS, Aurora, Cloud SQL,
/// Azure and Supabase offer it) by the SQL edition's owner, who is no superuser; every minute,
/// the finest schedule of Debian 12's pg_cron 1.4.
#[test]
fn pg_cron_purges_expired_keys() {
    let pg_config = std::env::var("PG_CONFIG").unwrap_or_else(|_| "pg_config".into());
    let out = std::process::Command::new(&pg_config)
        .arg("--pkglibdir")
        .output()
        .expect("pg_config --pkglibdir");
    let libdir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !Path::new(&libdir).join("pg_cron.so").exists() {
        skip_test(
            "pg_cron",
            &format!("pg_cron is not installed in {libdir} (Debian: postgresql-15-cron)"),
        );
        return;
    }
    let server = plain_server(&[
        "shared_preload_libraries = 'pg_cron'",
        "cron.database_name = 'postgres'",
        // jobs in background workers: no connection back to the server needed
        "cron.use_background_workers = on",
        "max_worker_processes = 20",
    ]);
    server
        .client()
        .batch_execute(&format!(
            "CREATE EXTENSION pg_cron; GRANT USAGE ON SCHEMA cron TO {ADMIN};"
        ))
        .expect("pg_cron");
    let mut admin = server.client_as(ADMIN);
    expired_backlog(&mut admin, "t", 5_000);
    admin
        .execute(
            "SELECT cron.schedule('idem-purge', '* * * * *', 'SELECT idem_purge()')",
            &[],
        )
        .expect("schedule");
    let started = Instant::now();
    wait_for(
        "pg_cron's idem_purge() to empty idem.keys",
        Duration::from_secs(150),
        || count_keys(&mut admin) == 0,
    );
    // the keys are gone when the job's transaction commits; its status a moment later
    wait_for(
        "pg_cron's run to be recorded as succeeded",
        Duration::from_secs(30),
        || {
            let status: Option<String> = admin
                .query_opt(
                    "SELECT status FROM cron.job_run_details ORDER BY start_time DESC LIMIT 1",
                    &[],
                )
                .expect("job status")
                .map(|row| row.get(0));
            status.as_deref() == Some("succeeded")
        },
    );
    eprintln!(
        "pg_cron purged 5,000 expired keys within {:?}",
        started.elapsed()
    );
}
