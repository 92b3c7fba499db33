//! One move: a source's keys and what an application is told about them, the moves as the
//! suite's documentation writes them, and what the target must answer afterwards.

use super::*;

// ---------------------------------------------------------------------------------------------
// The keys of a source, and what an application is told about them
// ---------------------------------------------------------------------------------------------

const BODY: &str = r#"{"id": 1, "amount": 99.90}"#;

/// What the source looked like when it moved.
pub(super) struct Before {
    /// every answer an application gets for the keys whose answers do not change by themselves
    answers: Vec<String>,
    /// every fence the source handed out
    fences: Vec<i64>,
    /// t1/held: in progress, its lease an hour long
    held: i64,
    /// t1/stalled: in progress, its lease a second long, with a checkpoint
    pub(super) stalled: i64,
    pub(super) stalled_lease_ends: Instant,
    /// whether the source had watermarks (idem_claim_seq worked there)
    watermarks: bool,
    /// the source's fence floor
    floor: i64,
}

impl Before {
    fn max_fence(&self) -> i64 {
        *self.fences.iter().max().expect("fences")
    }
}

pub(super) fn claim_fence(db: &mut Client, tenant: &str, key: &str, lease: &str, ttl: &str) -> i64 {
    let row = db
        .query_one(
            "SELECT outcome, fence FROM idem_claim($1, $2, 'h', lease => $3::text::interval, \
                    ttl => $4::text::interval)",
            &[&tenant, &key, &lease, &ttl],
        )
        .unwrap_or_else(|e| panic!("claim {tenant}/{key}: {e:?}"));
    assert_eq!(row.get::<_, String>(0), "claimed", "{tenant}/{key}");
    row.get(1)
}

/// Sets up keys in every state on `source` through its application role, with tenant grants
/// on, and records what the application is told; `orders`: a business table written in the
/// transactions of the completed key (the whole-database paths move it too).
pub(super) fn populate(source: &Side, orders: bool) -> Before {
    source.tenant_grants_on();
    source.grant("t1");
    source.grant("t2");
    if orders {
        let mut owner = source.owner_client();
        owner
            .batch_execute(&format!(
                "CREATE TABLE public.orders (key text PRIMARY KEY, amount numeric NOT NULL);
                 ALTER TABLE public.orders OWNER TO {ADMIN};
                 GRANT SELECT, INSERT ON public.orders TO {USER};"
            ))
            .expect("orders");
    }
    let mut db = source.user();
    let mut fences = Vec::new();

    // completed, in the business transaction
    let mut tx = db.transaction().expect("begin");
    let row = tx
        .query_one(
            "SELECT outcome, fence FROM idem_claim('t1', 'done', 'h')",
            &[],
        )
        .expect("claim t1/done");
    assert_eq!(row.get::<_, String>(0), "claimed");
    let fence: i64 = row.get(1);
    fences.push(fence);
    if orders {
        tx.execute("INSERT INTO public.orders VALUES ('done', 99.90)", &[])
            .expect("the business write");
    }
    tx.execute(
        "SELECT idem_complete('t1', 'done', $1, 201, $2::text::jsonb)",
        &[&fence, &BODY],
    )
    .expect("complete t1/done");
    tx.commit().expect("commit");
    // completed without a body, in another tenant
    let fence = claim_fence(&mut db, "t2", "done2", "1 minute", "1 day");
    fences.push(fence);
    db.execute("SELECT idem_complete('t2', 'done2', $1, 204)", &[&fence])
        .expect("complete t2/done2");
    // a final failure
    let fence = claim_fence(&mut db, "t1", "failed", "1 minute", "1 day");
    fences.push(fence);
    db.execute(
        "SELECT idem_fail_final('t1', 'failed', $1, 409, '{\"error\": \"conflict\"}')",
        &[&fence],
    )
    .expect("fail t1/failed");
    // in progress: a lease of an hour, with a checkpoint, and one of a second
    let held = claim_fence(&mut db, "t1", "held", "1 hour", "1 day");
    fences.push(held);
    db.execute(
        "SELECT idem_checkpoint('t1', 'held', $1, 'charged', '{\"charge\": \"ch_1\"}')",
        &[&held],
    )
    .expect("checkpoint t1/held");
    let stalled = claim_fence(&mut db, "t1", "stalled", "1 second", "1 day");
    let stalled_lease_ends = Instant::now() + Duration::from_millis(1100);
    fences.push(stalled);
    db.execute(
        "SELECT idem_checkpoint('t1', 'stalled', $1, 'step-2', '{\"n\": 2}')",
        &[&stalled],
    )
    .expect("checkpoint t1/stalled");
    // released: given back, so absent
    let fence = claim_fence(&mut db, "t1", "released", "1 minute", "1 day");
    fences.push(fence);
    db.execute("SELECT idem_release('t1', 'released', $1)", &[&fence])
        .expect("release t1/released");
    // expiring within a second: in progress, and completed (a second, not less: a loaded
    // machine must not see a key expire between its claim and its completion)
    fences.push(claim_fence(&mut db, "t2", "gone", "1 second", "1 second"));
    let fence = claim_fence(&mut db, "t2", "brief", "1 minute", "1 second");
    fences.push(fence);
    db.execute("SELECT idem_complete('t2', 'brief', $1, 200)", &[&fence])
        .expect("complete t2/brief");
    // consumed messages (narrow rows), one of them expiring
    db.batch_execute(
        "SELECT idem_consume('t1', 'm1');
         SELECT idem_consume('t1', 'm2');
         SELECT * FROM idem_consume_many('t2', ARRAY['m3', 'm4']);
         SELECT idem_consume('t1', 'm-brief', '1 second');",
    )
    .expect("consume");
    let expired = Instant::now() + Duration::from_millis(1200);
    // watermarks, where the edition has them
    let watermarks = match db.batch_execute(
        "SELECT * FROM idem_claim_seq('t1', 'partition-0', 1234);
         SELECT * FROM idem_claim_seq('t2', 'p1', 7);",
    ) {
        Ok(()) => true,
        Err(e) if sqlstate(&e) == "0A000" => {
            eprintln!(
                "note: {} has no idem_claim_seq yet (0A000): this move carries no watermark",
                source.name()
            );
            false
        }
        Err(e) => panic!("idem_claim_seq on {}: {e:?}", source.name()),
    };
    // the expiring keys expire
    std::thread::sleep(expired.saturating_duration_since(Instant::now()));

    let floor = source.floor();
    for fence in &fences {
        assert!(
            *fence <= floor,
            "{}: fence {fence} above the floor {floor} (idem.fence_seq)",
            source.name()
        );
    }
    Before {
        answers: answers(&mut source.user()),
        fences,
        held,
        stalled,
        stalled_lease_ends,
        watermarks,
        floor,
    }
}

/// Claims whose answers change nothing, and consumes of keys already done: what an application
/// is told about each of them, fences and times included (they are data).
fn answers(db: &mut Client) -> Vec<String> {
    let claims = [
        ("t1", "done", "h"),
        ("t1", "done", "other"),
        ("t2", "done2", "h"),
        ("t1", "failed", "h"),
        ("t1", "failed", "other"),
        ("t1", "held", "h"),
        ("t1", "held", "other"),
        ("t1", "m1", ""),
        ("t1", "m1", "h"),
        ("t2", "m3", ""),
    ];
    let consumes = [
        ("t1", "done"),
        ("t2", "done2"),
        ("t1", "failed"),
        ("t1", "m1"),
        ("t1", "m2"),
        ("t2", "m3"),
        ("t2", "m4"),
    ];
    let mut out = Vec::new();
    for (tenant, key, hash) in claims {
        let row = db
            .query_one(
                "SELECT ROW(c.outcome, c.fence, c.attempt, c.response_code, c.response_body, \
                            c.lease_expires_at, c.expires_at, c.checkpoint_phase, \
                            c.checkpoint_data)::text \
                   FROM idem_claim($1, $2, $3) AS c",
                &[&tenant, &key, &hash],
            )
            .unwrap_or_else(|e| panic!("claim {tenant}/{key} {hash}: {e:?}"));
        out.push(format!(
            "idem_claim({tenant}, {key}, {hash:?}) = {}",
            row.get::<_, String>(0)
        ));
    }
    for (tenant, key) in consumes {
        let row = db
            .query_one("SELECT idem_consume($1, $2)", &[&tenant, &key])
            .unwrap_or_else(|e| panic!("consume {tenant}/{key}: {e:?}"));
        let new: bool = row.get(0);
        assert!(!new, "idem_consume({tenant}, {key}): already done");
        out.push(format!("idem_consume({tenant}, {key}) = {new}"));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The moves, as the module documentation writes them
// ---------------------------------------------------------------------------------------------

/// pg_idem's rows only (step 3).
pub(super) fn move_rows(source: &Side, target: &Side) {
    copy_rows(source, target);
    raise_floor(source, target);
}

/// Step 3's dump and restore of the rows.
pub(super) fn copy_rows(source: &Side, target: &Side) {
    let rows = target.dir().join("idem-rows.sql");
    let rows = rows.to_string_lossy();
    let mut dump = source.conn(source.owner());
    dump.extend(
        [
            "--data-only",
            "--table=idem.*",
            "--exclude-table=idem.settings",
            "--exclude-table=idem.role_settings",
            "--exclude-table=idem.key_lock_secret",
            "--exclude-table=idem.fence_seq",
            "-f",
            &rows,
        ]
        .map(String::from),
    );
    let dump: Vec<&str> = dump.iter().map(String::as_str).collect();
    run_ok("pg_dump --data-only", source.run_bin("pg_dump", &dump));
    run_ok(
        "psql -f idem-rows.sql",
        target.psql(
            target.owner(),
            &["-X", "-q", "-1", "-v", "ON_ERROR_STOP=1", "-f", &rows],
        ),
    );
}

/// Step 3's fence floor: the target's sequence up to the source's, never down.
fn raise_floor(source: &Side, target: &Side) {
    let floor = run_ok(
        "the source's floor",
        source.psql(
            source.owner(),
            &[
                "-X",
                "-A",
                "-t",
                "-c",
                "SELECT last_value FROM idem.fence_seq",
            ],
        ),
    );
    let floor = floor.trim();
    assert!(
        !floor.is_empty() && floor.chars().all(|c| c.is_ascii_digit()),
        "the floor: {floor:?}"
    );
    run_ok(
        "setval",
        target.psql(
            target.owner(),
            &[
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                &format!(
                    "SELECT setval('idem.fence_seq', GREATEST(last_value, {floor})) FROM idem.fence_seq"
                ),
            ],
        ),
    );
}

/// A whole database, native -> pg_tle (registered, not created).
pub(super) fn move_database_to_tle(source: &Side, target: &Side) {
    let file = target.dir().join("app.dump");
    let file = file.to_string_lossy();
    let mut dump = source.conn(source.owner());
    dump.extend(["-Fc", "-f", &file].map(String::from));
    let dump: Vec<&str> = dump.iter().map(String::as_str).collect();
    run_ok("pg_dump -Fc", source.run_bin("pg_dump", &dump));
    let mut restore = target.conn(target.owner());
    restore.extend(["--exit-on-error", &file].map(String::from));
    let restore: Vec<&str> = restore.iter().map(String::as_str).collect();
    run_ok("pg_restore", target.run_bin("pg_restore", &restore));
}

/// A whole database, pg_tle -> native (a database without pg_idem), pg_tle's entries and the
/// settings' rows left out of the restore's list.
pub(super) fn move_database_from_tle(source: &Side, target: &Side) {
    let file = target.dir().join("app.dump");
    let list = target.dir().join("app.list");
    let (file, list) = (file.to_string_lossy(), list.to_string_lossy());
    let mut dump = source.conn(source.owner());
    dump.extend(["-Fc", "-f", &file].map(String::from));
    let dump: Vec<&str> = dump.iter().map(String::as_str).collect();
    run_ok("pg_dump -Fc", source.run_bin("pg_dump", &dump));
    let filter = format!(
        "set -o pipefail; '{}' -l '{file}' | grep -v -E ' pg_?tle( |$)|TABLE DATA idem (role_)?settings' > '{list}'",
        target.bin("pg_restore").display()
    );
    run_ok(
        "pg_restore -l | grep -v",
        as_server_user(Path::new("/bin/bash"))
            .args(["-c", &filter])
            .output()
            .expect("bash"),
    );
    let listed = std::fs::read_to_string(&*list).expect("the list");
    assert!(
        listed.contains("EXTENSION - pg_idem") && listed.contains("TABLE DATA idem keys"),
        "the list lost pg_idem:\n{listed}"
    );
    let mut restore = target.conn(target.owner());
    restore.extend(["--exit-on-error", "-L", &list, &file].map(String::from));
    let restore: Vec<&str> = restore.iter().map(String::as_str).collect();
    run_ok("pg_restore -L", target.run_bin("pg_restore", &restore));
}

// ---------------------------------------------------------------------------------------------
// The target
// ---------------------------------------------------------------------------------------------

/// A fence the target hands out: above every fence of the source.
fn assert_above(before: &Before, fence: i64, what: &str, target: &Side) {
    assert!(
        fence > before.max_fence(),
        "{}: {what} got fence {fence}, not above the source's {}",
        target.name(),
        before.max_fence()
    );
}

pub(super) fn outcome_fence_attempt(
    db: &mut Client,
    tenant: &str,
    key: &str,
) -> (String, Option<i64>, Option<i32>) {
    let row = db
        .query_one(
            "SELECT outcome, fence, attempt FROM idem_claim($1, $2, 'h')",
            &[&tenant, &key],
        )
        .unwrap_or_else(|e| panic!("claim {tenant}/{key}: {e:?}"));
    (row.get(0), row.get(1), row.get(2))
}

/// Everything the source's keys were, the target's keys are; `floor_before`: the target's fence
/// floor before the move (a target in use keeps a higher one).
pub(super) fn check_target(target: &Side, before: &Before, floor_before: i64) {
    let name = target.name();
    target.tenant_grants_on();
    let floor = target.floor();
    assert!(
        floor >= before.floor && floor >= floor_before,
        "{name}: fence floor {floor} after the move, below the source's {} or its own {floor_before}",
        before.floor
    );

    let mut db = target.user();
    assert_eq!(
        answers(&mut db),
        before.answers,
        "{name} answers otherwise than the source"
    );

    // the lease is still held, by the source's fence
    db.execute(
        "SELECT idem_checkpoint('t1', 'held', $1, 'shipped', '{\"parcel\": 1}')",
        &[&before.held],
    )
    .unwrap_or_else(|e| panic!("{name}: the source's fence checkpoints its key: {e:?}"));
    db.execute("SELECT idem_heartbeat('t1', 'held', $1)", &[&before.held])
        .unwrap_or_else(|e| panic!("{name}: the source's fence heartbeats its key: {e:?}"));
    let err = db
        .execute(
            "SELECT idem_complete('t1', 'held', $1, 200)",
            &[&before.stalled],
        )
        .expect_err("another key's fence must not complete t1/held");
    assert_eq!(sqlstate(&err), "55000", "{name}: {err:?}");
    let (outcome, _, _) = outcome_fence_attempt(&mut db, "t1", "held");
    assert_eq!(outcome, "in_progress", "{name}: t1/held is leased");
    db.execute(
        "SELECT idem_complete('t1', 'held', $1, 200, '{\"shipped\": true}')",
        &[&before.held],
    )
    .unwrap_or_else(|e| panic!("{name}: the source's fence completes its key: {e:?}"));
    let row = db
        .query_one(
            "SELECT outcome, response_code, response_body::text FROM idem_claim('t1', 'held', 'h')",
            &[],
        )
        .expect("claim t1/held");
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, Option<i32>>(1),
            row.get::<_, Option<String>>(2)
        ),
        (
            "completed".to_string(),
            Some(200),
            Some(r#"{"shipped": true}"#.to_string())
        ),
        "{name}: t1/held completed on the target"
    );

    // the stalled attempt is taken over, from its checkpoint, by a larger fence
    let wait = before
        .stalled_lease_ends
        .saturating_duration_since(Instant::now());
    std::thread::sleep(wait);
    let row = db
        .query_one(
            "SELECT outcome, fence, attempt, checkpoint_phase, checkpoint_data::text \
               FROM idem_claim('t1', 'stalled', 'h')",
            &[],
        )
        .expect("claim t1/stalled");
    assert_eq!(
        (
            row.get::<_, String>(0),
            row.get::<_, i32>(2),
            row.get::<_, Option<String>>(3),
            row.get::<_, Option<String>>(4)
        ),
        (
            "claimed".to_string(),
            2,
            Some("step-2".to_string()),
            Some(r#"{"n": 2}"#.to_string())
        ),
        "{name}: the takeover of t1/stalled"
    );
    assert_above(before, row.get(1), "the takeover of t1/stalled", target);
    let err = db
        .execute(
            "SELECT idem_complete('t1', 'stalled', $1, 200)",
            &[&before.stalled],
        )
        .expect_err("the stalled attempt's fence must be refused after the takeover");
    assert_eq!(sqlstate(&err), "55000", "{name}: {err:?}");

    // expired, released and new keys: first attempts, above every fence of the source
    for (tenant, key) in [
        ("t2", "gone"),
        ("t2", "brief"),
        ("t1", "released"),
        ("t1", "new"),
    ] {
        let (outcome, fence, attempt) = outcome_fence_attempt(&mut db, tenant, key);
        assert_eq!(
            (outcome.as_str(), attempt),
            ("claimed", Some(1)),
            "{name}: {tenant}/{key}"
        );
        assert_above(
            before,
            fence.expect("a claim's fence"),
            &format!("{tenant}/{key}"),
            target,
        );
    }
    for (key, new) in [("m-brief", true), ("m-new", true), ("m1", false)] {
        let got: bool = db
            .query_one("SELECT idem_consume('t1', $1)", &[&key])
            .expect("consume")
            .get(0);
        assert_eq!(got, new, "{name}: idem_consume(t1, {key})");
    }

    // the grants still draw the boundary
    let err = db
        .query_one("SELECT outcome FROM idem_claim('t3', 'k', 'h')", &[])
        .expect_err("app_user has no grant on t3");
    assert_eq!(sqlstate(&err), "42501", "{name}: {err:?}");
    let grants: Vec<String> = target.owner_client().column(
        "SELECT role::text || '/' || tenant FROM idem.tenant_grants ORDER BY 1",
        &[],
    );
    assert_eq!(grants, ["app_user/t1", "app_user/t2"], "{name}");

    if before.watermarks {
        check_watermarks(target, &mut db);
    }
}

fn check_watermarks(target: &Side, db: &mut Client) {
    let name = target.name();
    let readable = match db.query_one("SELECT idem_watermark('t1', 'partition-0')", &[]) {
        Ok(row) => {
            assert_eq!(row.get::<_, Option<i64>>(0), Some(1234), "{name}");
            true
        }
        Err(e) if sqlstate(&e) == "0A000" => {
            eprintln!("note: {name} has no idem_watermark yet (0A000): only the rows are checked");
            false
        }
        Err(e) => panic!("{name}: idem_watermark: {e:?}"),
    };
    let rows: Vec<String> = target.owner_client().column(
        "SELECT tenant || '/' || stream || '=' || watermark FROM idem.watermarks ORDER BY 1",
        &[],
    );
    assert_eq!(
        rows,
        ["t1/partition-0=1234", "t2/p1=7"],
        "{name}: idem.watermarks"
    );
    if readable {
        for (seq, expected) in [(1234_i64, "duplicate"), (1235, "new")] {
            let outcome: String = db
                .query_one(
                    "SELECT outcome FROM idem_claim_seq('t1', 'partition-0', $1)",
                    &[&seq],
                )
                .expect("idem_claim_seq")
                .get(0);
            assert_eq!(outcome, expected, "{name}: idem_claim_seq {seq}");
        }
    }
}

/// A target in use before the move: a key of its own, in progress, and the floor it set.
fn use_target(target: &Side) -> (i64, i64) {
    let mut db = target.user();
    let fence = claim_fence(&mut db, "t9", "own", "1 hour", "1 day");
    (fence, target.floor())
}

/// The target's own key is untouched by the move.
fn check_own_key(target: &Side, own: i64) {
    target.grant("t9");
    let mut db = target.user();
    db.execute("SELECT idem_complete('t9', 'own', $1, 200)", &[&own])
        .unwrap_or_else(|e| panic!("{}: the target's own key: {e:?}", target.name()));
}

/// The data path (pg_idem's rows only) from `source` to `target`, the target in use before.
pub(super) fn rows_move(source: &Side, target: &Side) {
    let before = populate(source, false);
    let (own, floor_before) = use_target(target);
    move_rows(source, target);
    check_target(target, &before, floor_before);
    check_own_key(target, own);
}
