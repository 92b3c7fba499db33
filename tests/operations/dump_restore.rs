//! pg_dump of a database with keys in every state, restored into a fresh database, gives back the
//! same keys, watermarks and fence sequence, and the same behaviour.

use std::thread;
use std::time::Duration;

use pg_idem_tests::*;

#[test]
fn dump_and_restore_keep_keys_and_behaviour() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    admin.batch_execute("CREATE DATABASE source").unwrap();
    admin.batch_execute("CREATE DATABASE restored").unwrap();
    let mut db = server.client_db("source");
    install_pg_idem(&mut db);

    let completed = claim(&mut db, "t1", "completed", "h");
    complete(
        &mut db,
        "t1",
        "completed",
        completed.fence.unwrap(),
        201,
        r#"{"id": 1, "amount": 99.90}"#,
    );
    let failed = claim(&mut db, "t1", "failed", "h");
    db.execute(
        "SELECT idem_fail_final('t1', 'failed', $1, 409, '{\"error\": \"conflict\"}')",
        &[&failed.fence],
    )
    .unwrap();
    let live = claim_with(&mut db, "t2", "live", "h", "10 min", None);
    let stalled = claim_with(&mut db, "t2", "stalled", "h", "1 s", None);
    db.execute(
        "SELECT idem_checkpoint('t2', 'stalled', $1, 'step-2', '{\"n\": 2}')",
        &[&stalled.fence],
    )
    .unwrap();
    db.query_one(
        "SELECT * FROM idem_claim_seq('t1', 'partition-0', 1234)",
        &[],
    )
    .unwrap();
    let source_keys = all_keys(&mut db);
    let last_fence: i64 = db
        .query_one("SELECT last_value FROM idem.fence_seq", &[])
        .unwrap()
        .get(0);

    let file = server.dir().join("source.dump");
    let file = file.to_str().unwrap();
    let port = server.port.to_string();
    let out = server.run_bin(
        "pg_dump",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            dba_role(),
            "-Fc",
            "-f",
            file,
            "source",
        ],
    );
    assert!(
        out.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = server.run_bin(
        "pg_restore",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            dba_role(),
            "-d",
            "restored",
            file,
        ],
    );
    assert!(
        out.status.success(),
        "pg_restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut restored = server.client_db("restored");
    assert_eq!(
        all_keys(&mut restored),
        source_keys,
        "the restored keys differ"
    );
    let restored_fence: i64 = restored
        .query_one("SELECT last_value FROM idem.fence_seq", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        restored_fence, last_fence,
        "the fence sequence must come back"
    );
    let mark: Option<i64> = restored
        .query_one("SELECT idem_watermark('t1', 'partition-0')", &[])
        .unwrap()
        .get(0);
    assert_eq!(mark, Some(1234));

    let r = claim(&mut restored, "t1", "completed", "h");
    assert_eq!(
        (r.outcome.as_str(), r.response_body.as_deref()),
        ("completed", Some(r#"{"id": 1, "amount": 99.90}"#))
    );
    assert_eq!(claim(&mut restored, "t1", "failed", "h").outcome, "failed");
    assert_eq!(
        claim(&mut restored, "t1", "completed", "other").outcome,
        "mismatch"
    );
    assert_eq!(
        claim(&mut restored, "t2", "live", "h").outcome,
        "in_progress"
    );
    complete(&mut restored, "t2", "live", live.fence.unwrap(), 200, "{}");
    thread::sleep(Duration::from_millis(1100));
    let takeover = claim(&mut restored, "t2", "stalled", "h");
    assert_eq!(takeover.outcome, "claimed");
    assert_eq!(takeover.attempt, Some(2));
    assert!(
        takeover.fence.unwrap() > last_fence,
        "no fence may be handed out twice after a restore"
    );
    assert_eq!(takeover.checkpoint_data.as_deref(), Some(r#"{"n": 2}"#));
    let (outcome,): (String,) = restored
        .query_one(
            "SELECT outcome FROM idem_claim_seq('t1', 'partition-0', 1234)",
            &[],
        )
        .map(|r| (r.get(0),))
        .unwrap();
    assert_eq!(outcome, "duplicate");
}
