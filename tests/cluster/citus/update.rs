//! The update scripts on a cluster: message rows narrowed on every shard.

use super::*;

/// The update to 0.5.0 on a cluster that distributes idem.keys (installed at 0.4.0 through
/// every upgrade script, which also proves they run on a cluster: a temporary table in the 0.4.0
/// script made the nodes' prepared transaction fail): the NOT NULL constraints a message row
/// needs gone are gone on every shard too, and messages are narrow rows through every path; a
/// whole row consumed before answers alike.
#[test]
fn the_update_on_a_cluster_narrows_message_rows_on_every_shard() {
    let Some(cluster) = cluster_distributed(None, &[]) else {
        return;
    };
    install_released_script();
    let mut db = cluster.coordinator.client();
    db.batch_execute(&format!(
        "DROP EXTENSION pg_idem; CREATE EXTENSION pg_idem VERSION '{RELEASED}'; \
         ALTER EXTENSION pg_idem UPDATE TO '0.4.0'; SELECT idem_distribute(8)"
    ))
    .unwrap();
    let narrow = |db: &mut Client, key: &str| -> bool {
        db.query_one(
            "SELECT fence IS NULL AND expires_at IS NULL AND ttl IS NULL \
               FROM idem.keys WHERE tenant = 'acme' AND key = $1",
            &[&key],
        )
        .unwrap()
        .get(0)
    };
    let consumed: bool = db
        .query_one("SELECT idem_consume('acme', 'before')", &[])
        .unwrap()
        .get(0);
    assert!(consumed);
    assert!(!narrow(&mut db, "before"), "a whole row under 0.4.0");
    db.batch_execute("ALTER EXTENSION pg_idem UPDATE").unwrap();
    let not_null_on_shards: i64 = db
        .query_one(
            "SELECT sum(result::bigint)::bigint FROM run_command_on_shards('idem.keys', \
               $$SELECT count(*) FROM pg_attribute WHERE attrelid = '%s'::regclass \
                  AND attname IN ('fence', 'claimed_at', 'expires_at', 'ttl', 'attempt', \
                                  'request_hash') AND attnotnull$$)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        not_null_on_shards, 0,
        "every shard allows NULL after the update"
    );
    for path in PATHS {
        let key = format!("after-{path:?}");
        let new = ok(
            &mut db,
            path,
            &format!("idem_consume('acme', {})::int", q(&key)),
        );
        assert_eq!(new.as_deref(), Some("1"), "{path:?}");
        assert!(narrow(&mut db, &key), "{key}: a narrow row");
    }
    for key in [
        "before",
        "after-Delegated",
        "after-InTransaction",
        "after-Coordinator",
    ] {
        for path in PATHS {
            let again = ok(
                &mut db,
                path,
                &format!("idem_consume('acme', {})::int", q(key)),
            );
            assert_eq!(
                again.as_deref(),
                Some("0"),
                "{key} was processed ({path:?})"
            );
            let outcome = ok(
                &mut db,
                path,
                &format!("(idem_claim('acme', {}, '')).outcome", q(key)),
            );
            assert_eq!(outcome.as_deref(), Some("completed"), "{key} ({path:?})");
        }
    }
}
