//! What fences promise and what they do not (docs/security.md: "A fence is a token against
//! stale workers, not a secret"), and that no number of databases or re-creations of the
//! extension in one server lifetime exhausts anything fences need.

use std::time::Duration;

use pg_idem_tests::*;

/// The fence of a simple-protocol result whose last statement returned one bigint.
fn last_value(messages: &[postgres::SimpleQueryMessage]) -> i64 {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(row) => row.get(0).map(|v| v.parse().unwrap()),
            _ => None,
        })
        .expect("a value")
}

#[test]
fn a_fence_can_be_found_by_whoever_may_act_on_the_tenant_and_by_nobody_else() {
    let server = Server::start(&[]);
    server
        .client()
        .batch_execute(
            "CREATE ROLE worker LOGIN; CREATE ROLE scanner LOGIN; CREATE ROLE outsider LOGIN; \
             SELECT idem_grant_tenant('worker', 'bank'), idem_grant_tenant('scanner', 'bank')",
        )
        .unwrap();
    server.tenant_grants_on();
    let mut worker = server.client_as("worker");
    let held = claim_with(&mut worker, "bank", "payout", "h", "10 min", None);
    let fence = held.fence.unwrap();

    // what the scanner sees: the holder's lease, so the claim's clock reading
    let mut scanner = server.client_as("scanner");
    let seen: i64 = scanner
        .query_one(
            "SELECT (extract(epoch FROM c.lease_expires_at - interval '10 min' \
                     - timestamptz '2000-01-01 00:00:00+00') * 1000000)::int8 \
               FROM idem_claim('bank', 'payout', 'h') AS c",
            &[],
        )
        .unwrap()
        .get(0);
    // natively fences are read from a clock: the live one is near the claim's clock reading;
    // the SQL edition draws them from idem.fence_seq: the live one is among the first numbers
    let start = match edition() {
        Edition::Native => seen,
        Edition::Sql => 1,
    };
    let mut found = None;
    for (calls, guess) in (start..start + 200_000).enumerate() {
        if scanner
            .query_one("SELECT idem_heartbeat('bank', 'payout', $1)", &[&guess])
            .is_ok()
        {
            found = Some((guess, calls + 1));
            break;
        }
    }
    let (guess, calls) = found.expect("the live fence is near where it was looked for");
    assert_eq!(guess, fence);
    eprintln!("the live fence was found in {calls} calls");

    // a role that may not act on the tenant learns nothing, whatever it guesses
    let mut outsider = server.client_as("outsider");
    for guess in [fence - 1, fence, fence + 1] {
        let err = outsider
            .query_one("SELECT idem_heartbeat('bank', 'payout', $1)", &[&guess])
            .expect_err("refused");
        assert_eq!(sqlstate(&err), "42501");
    }
}

#[test]
fn thousands_of_databases_and_recreations_never_run_out_of_fences() {
    if native_only(
        "the fence clock: fences above a flushed floor across re-created extensions, new \
         databases and restarts (the SQL edition's fences come from idem.fence_seq)",
    ) {
        return;
    }
    let server = Server::start(&[]);
    let mut db = server.client();
    let mut other = server.client();
    let mut highest = 0_i64;
    let mut record = |fence: i64, what: &str| {
        assert!(fence > highest, "{what}: fence {fence} after {highest}");
        highest = fence;
    };
    // more than the slots of shared memory, each re-creation a new fence sequence in the same
    // database: a re-creation that took a slot of its own would run out before the end. A debug
    // build, which the test command installs, has 256 slots (src/store/fences.rs); against a
    // release build (4,096) set PG_IDEM_FENCE_RECREATIONS=4200.
    let recreations: u32 = std::env::var("PG_IDEM_FENCE_RECREATIONS")
        .ok()
        .map(|n| {
            n.parse()
                .unwrap_or_else(|_| panic!("PG_IDEM_FENCE_RECREATIONS={n}: not a number"))
        })
        .unwrap_or(300);
    for round in 0..recreations {
        let fence = last_value(
            &db.simple_query(
                "DROP EXTENSION pg_idem; CREATE EXTENSION pg_idem; \
                 SELECT fence FROM idem_claim('t', 'k', 'h')",
            )
            .unwrap_or_else(|e| panic!("round {round}: {e:?}")),
        );
        record(fence, "a re-created extension");
        if round % 100 == 0 {
            // a backend that knew an earlier sequence's floor
            let fence = last_value(
                &other
                    .simple_query(&format!(
                        "SELECT fence FROM idem_claim('t', 'other-{round}', 'h')"
                    ))
                    .unwrap(),
            );
            record(fence, "another backend");
            // a database of its own, dropped again
            let name = format!("scratch_{round}");
            db.batch_execute(&format!("CREATE DATABASE {name}"))
                .unwrap();
            let mut scratch = server.client_db(&name);
            let fence = last_value(
                &scratch
                    .simple_query(
                        "CREATE EXTENSION pg_idem; SELECT fence FROM idem_claim('t', 'k', 'h')",
                    )
                    .unwrap(),
            );
            record(fence, "a new database");
            drop(scratch);
            db.batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
                .unwrap();
        }
    }
    // and after a restart, still above everything handed out before
    drop(db);
    drop(other);
    server.stop("immediate");
    server.start_again();
    let mut db = server.client();
    wait_for(
        "the server to accept claims",
        Duration::from_secs(30),
        || db.simple_query("SELECT 1").is_ok(),
    );
    let fence = last_value(
        &db.simple_query("SELECT fence FROM idem_claim('t', 'after-restart', 'h')")
            .unwrap(),
    );
    record(fence, "after a crash restart");
    amcheck(&mut db);
}

/// One slot of shared memory per database that draws fences: when every slot is taken by a
/// database that exists, the next database gets 54000 (naming how many there are), and once one
/// of them is dropped its slot serves the next. Run against a debug build, which holds 256 slots
/// (src/store/fences.rs); a release build's 4,096 take minutes of CREATE DATABASE, so there it is
/// reported as skipped.
#[test]
fn a_database_past_the_last_fence_slot_gets_54000_until_one_is_dropped() {
    if native_only(
        "the fence clock's slots in shared memory (the SQL edition draws from idem.fence_seq)",
    ) {
        return;
    }
    const AT_MOST: usize = 300;
    // what CREATE DATABASE costs is mostly its fsyncs, which nothing here needs
    let server = Server::start(&["fsync = off"]);
    let mut admin = server.client();
    // databases are copies of a template that has pg_idem, so each costs one CREATE DATABASE
    admin
        .batch_execute("CREATE DATABASE fences_template")
        .unwrap();
    server
        .client_db("fences_template")
        .batch_execute("CREATE EXTENSION pg_idem")
        .unwrap();
    let mut created = Vec::new();
    let refusal = loop {
        if created.len() == AT_MOST {
            skip_test(
                "debug-build",
                &format!(
                    "{AT_MOST} databases drew fences without running out of slots: a release \
                     build (4,096 slots) is installed; scripts/install.sh --debug installs one \
                     with 256"
                ),
            );
            return;
        }
        let name = format!("fences_{}", created.len());
        admin
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE fences_template"))
            .unwrap();
        let answer = server
            .client_db(&name)
            .simple_query("SELECT fence FROM idem_claim('t', 'k', 'h')");
        created.push(name);
        if let Err(e) = answer {
            break e;
        }
    };
    assert_eq!(sqlstate(&refusal), "54000", "{refusal:?}");
    let db_error = refusal.as_db_error().expect("a server error");
    let detail = db_error.detail().unwrap_or_default();
    // every database that drew a fence holds a slot: those created here before the refused
    // one, and postgres (the harness's claims in it, if any, came first) at most
    let slots: usize = detail
        .split_whitespace()
        .find_map(|word| word.parse().ok())
        .unwrap_or_else(|| panic!("the number of slots in the detail: {detail:?}"));
    let drew = created.len() - 1;
    assert!(
        drew == slots || drew + 1 == slots,
        "{drew} databases drew fences before one was refused, with {slots} slots: {detail}"
    );
    // the refused database still gets nothing; dropping another frees a slot for it
    let refused = created.pop().unwrap();
    let mut waiting = server.client_db(&refused);
    assert!(waiting
        .simple_query("SELECT fence FROM idem_claim('t', 'k', 'h')")
        .is_err());
    admin
        .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", created[0]))
        .unwrap();
    let fence = last_value(
        &waiting
            .simple_query("SELECT fence FROM idem_claim('t', 'k2', 'h')")
            .unwrap_or_else(|e| panic!("after a DROP DATABASE: {e:?}")),
    );
    assert!(fence > 0);
}
