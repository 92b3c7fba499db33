//! The table of decisions (rules/decisions.json), which `cargo test -p pg_idem_rules` runs
//! against the decisions themselves, run here through SQL: each case's row is made with
//! pg_idem's own calls and an UPDATE of its times, then idem_claim, idem_consume or
//! idem_assert_fence is asked, and its answer read back as the table writes it. Natively it runs
//! on the engine and again on the SPI path (a row trigger on idem.keys makes the engine hand
//! over); with PG_IDEM_EDITION=sql or sql-tle on the SQL edition.

use pg_idem_tests::*;
use serde_json::Value;

const OUR_REQUEST: &str = "h";
const OTHER_REQUEST: &str = "other-h";

fn table() -> Value {
    serde_json::from_str(include_str!("../../rules/decisions.json")).expect("rules/decisions.json")
}

fn cases<'t>(table: &'t Value, kind: &str) -> &'t Vec<Value> {
    let cases = table[kind].as_array().expect("a list of cases");
    assert!(cases.len() >= 4, "rules/decisions.json lost its {kind}");
    cases
}

fn text<'v>(value: &'v Value, field: &str) -> &'v str {
    value[field]
        .as_str()
        .unwrap_or_else(|| panic!("rules/decisions.json: no {field} in {value}"))
}

fn flag(case: &Value, field: &str) -> bool {
    case[field].as_bool().unwrap_or(false)
}

/// The paths this run can take: the engine and the SPI path natively, the SQL edition's one.
fn on_every_path(run: impl Fn(&mut Client, &str)) {
    // no purge while the cases run: a purged expired row decides as an absent one would, but
    // the table says which of the two each case is
    let server = Server::start(&["pg_idem.purge_interval = 0"]);
    let mut db = server.client();
    // the rows are made by claims, of old UUIDv7 keys too; a case that asks for the guard sets
    // it in its own transaction
    db.batch_execute("SET pg_idem.reject_stale_uuidv7 = off")
        .unwrap();
    run(&mut db, "");
    if edition() == Edition::Native {
        db.batch_execute(
            "CREATE FUNCTION public.decisions_pass() RETURNS trigger LANGUAGE plpgsql \
               AS $$ BEGIN RETURN NULL; END $$; \
             CREATE TRIGGER decisions_spi_path AFTER INSERT OR UPDATE OR DELETE ON idem.keys \
               FOR EACH ROW EXECUTE FUNCTION public.decisions_pass()",
        )
        .expect("a row trigger on idem.keys");
        run(&mut db, "spi path: ");
    }
    amcheck(&mut db);
}

/// Makes the case's row in `db` (a transaction when the row is the caller's own, `mine`): a
/// claim, finished as the row's state says, with its attempt and times set as the table says.
fn make_row(db: &mut impl GenericClient, key: &str, row: &Value) -> i64 {
    let request = match text(row, "request") {
        "same" => OUR_REQUEST,
        "other" => OTHER_REQUEST,
        other => panic!("rules/decisions.json: request {other:?}"),
    };
    let fence = claim(db, "t", key, request).fence.expect("a fence");
    match text(row, "state") {
        "in_progress" => {}
        "completed" => {
            db.execute(
                "SELECT idem_complete('t', $1, $2, 200, '{}')",
                &[&key, &fence],
            )
            .expect("idem_complete");
        }
        "failed" => {
            db.execute(
                "SELECT idem_fail_final('t', $1, $2, 422, '{}')",
                &[&key, &fence],
            )
            .expect("idem_fail_final");
        }
        other => panic!("rules/decisions.json: state {other:?}"),
    }
    let when = |field: &str, later: &str| match text(row, field) {
        "live" => later.to_string(),
        "passed" | "expired" => "-1 minute".to_string(),
        other => panic!("rules/decisions.json: {field} {other:?}"),
    };
    let lease = when("lease", "1 hour");
    let life = when("life", "1 day");
    let attempt = row["attempt"].as_i64().expect("attempt") as i32;
    db.execute(
        "UPDATE idem.keys SET attempt = $2, \
                lease_expires_at = pg_catalog.clock_timestamp() + $3::text::interval, \
                expires_at = pg_catalog.clock_timestamp() + $4::text::interval, \
                purge_after = pg_catalog.clock_timestamp() + $4::text::interval \
          WHERE tenant = 't' AND key = $1",
        &[&key, &attempt, &lease, &life],
    )
    .expect("the row's times");
    fence
}

fn attempt_answer(verb: &str, attempt: i32) -> String {
    if attempt > 1 {
        format!("{verb} {attempt} takeover")
    } else {
        format!("{verb} {attempt}")
    }
}

/// Runs the cases of `kind` that ask about a row made as the table says: for each, the row is
/// made (committed before, or in the asking transaction when it is the caller's own), `ask`
/// answers for the key in that transaction (with pg_idem.reject_stale_uuidv7 on when the case
/// says the key is a stale UUIDv7), and the answer must be the table's; then it rolls back.
fn run_row_cases(
    table: &Value,
    kind: &str,
    ask: impl Fn(&mut postgres::Transaction<'_>, &str, &Value) -> String,
) {
    on_every_path(|db, path| {
        for (n, case) in cases(table, kind).iter().enumerate() {
            let what = format!("{path}{kind}: {}", text(case, "case"));
            let key = if flag(case, "stale_key") {
                // a UUIDv7 of 2020-09-13: older than its ttl
                format!("01748a3a-1f40-7000-8{n:03}-{:012}", path.len())
            } else {
                format!("{kind}-{path}{n}")
            };
            let (row, mine) = (&case["row"], flag(case, "mine"));
            if !row.is_null() && !mine {
                make_row(db, &key, row);
            }
            let mut tx = db.transaction().unwrap();
            if flag(case, "stale_key") {
                tx.batch_execute("SET LOCAL pg_idem.reject_stale_uuidv7 = on")
                    .unwrap();
            }
            if !row.is_null() && mine {
                make_row(&mut tx, &key, row);
            }
            let got = ask(&mut tx, &key, case);
            assert_eq!(got, text(case, "expect"), "{what}");
            tx.rollback().unwrap();
        }
    });
}

#[test]
fn claims_decide_as_the_table_says_on_every_path() {
    run_row_cases(&table(), "claims", |tx, key, case| {
        match try_claim(tx, "t", key, OUR_REQUEST, None, None) {
            Ok(c) => match c.outcome.as_str() {
                "claimed" => attempt_answer("claim", c.attempt.expect("an attempt")),
                "completed" | "failed" => {
                    assert_eq!(c.outcome, text(&case["row"], "state"), "{case}");
                    "replay".into()
                }
                other => other.to_string(),
            },
            Err(e) => panic!("{case}: {e:?}"),
        }
    });
}

#[test]
fn consumes_decide_as_the_table_says_on_every_path() {
    run_row_cases(&table(), "consumes", |tx, key, case| {
        match tx.query_one("SELECT idem_consume('t', $1)", &[&key]) {
            Ok(row) if row.get::<_, bool>(0) => {
                let attempt: i32 = tx
                    .query_one(
                        "SELECT COALESCE(attempt, 1) FROM idem.keys \
                          WHERE tenant = 't' AND key = $1",
                        &[&key],
                    )
                    .expect("the message's row")
                    .get(0);
                attempt_answer("write", attempt)
            }
            Ok(_) => "duplicate".to_string(),
            Err(e) if sqlstate(&e) == "55P03" => {
                let detail = e.as_db_error().and_then(|d| d.detail()).unwrap_or("");
                if detail.starts_with("This transaction claimed it") {
                    "held mine".to_string()
                } else {
                    "held".to_string()
                }
            }
            Err(e) => panic!("{case}: {e:?}"),
        }
    });
}

#[test]
fn fenced_calls_decide_as_the_table_says_on_every_path() {
    let table = table();
    on_every_path(|db, path| {
        for (n, case) in cases(&table, "fenced").iter().enumerate() {
            let what = format!("{path}fenced: {}", text(case, "case"));
            let key = format!("fenced-{path}{n}");
            let fence = match case["row"].as_object() {
                None => 1,
                Some(_) => {
                    let row = &case["row"];
                    let shaped = serde_json::json!({
                        "state": text(row, "state"), "request": "same", "attempt": 1,
                        "lease": "live", "life": "live",
                    });
                    let fence = make_row(db, &key, &shaped);
                    match text(row, "fence") {
                        "same" => fence,
                        "other" => fence + 1_000,
                        other => panic!("rules/decisions.json: fence {other:?}"),
                    }
                }
            };
            let mut tx = db.transaction().unwrap();
            let got = match tx.execute("SELECT idem_assert_fence('t', $1, $2)", &[&key, &fence]) {
                Ok(_) => "holds".to_string(),
                Err(e) if sqlstate(&e) == "P0002" => "not_found".to_string(),
                Err(e) if sqlstate(&e) == "55000" => {
                    let detail = e.as_db_error().and_then(|d| d.detail()).unwrap_or("");
                    if detail.contains("already completed") {
                        "stale completed".to_string()
                    } else if detail.contains("final error") {
                        "stale failed".to_string()
                    } else if detail.contains("another attempt holds it") {
                        "stale not_holder".to_string()
                    } else {
                        panic!("{what}: 55000 with detail {detail:?}")
                    }
                }
                Err(e) => panic!("{what}: {e:?}"),
            };
            assert_eq!(got, text(case, "expect"), "{what}");
            tx.rollback().unwrap();
        }
    });
}
