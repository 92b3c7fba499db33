//! Upgrades: a server with keys in every state under the released 0.1.0 is updated with
//! `ALTER EXTENSION pg_idem UPDATE`; every key answers as before, fences keep growing, and the
//! upgraded schema is the same as a fresh install of the new version.

use std::collections::BTreeSet;
use std::thread;
use std::time::Duration;

use pg_idem_tests::*;

/// Why every test here is the native edition's only.
const NATIVE_ONLY: &str = "ALTER EXTENSION pg_idem UPDATE through sql/pg_idem--*--*.sql with \
    the new library loaded; the SQL edition's updates are tests/sql_edition/sql_edition_updates.rs's";

fn extversion(db: &mut Client) -> String {
    db.query_one(
        "SELECT extversion FROM pg_extension WHERE extname = 'pg_idem'",
        &[],
    )
    .unwrap()
    .get(0)
}

fn max_fence(db: &mut Client) -> i64 {
    db.query_one("SELECT max(fence) FROM idem.keys", &[])
        .unwrap()
        .get(0)
}

/// A catalog description of every object of the extension, one line each, without OIDs.
const DESCRIBE: &str = r#"
WITH ext AS (SELECT e.oid, e.extconfig, e.extcondition FROM pg_extension e WHERE e.extname = 'pg_idem'),
members AS (
    SELECT d.classid, d.objid FROM pg_depend d, ext
     WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'),
rels AS (
    SELECT c.* FROM members m JOIN pg_class c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid)
SELECT line FROM (
    SELECT 'function ' || p.oid::regprocedure::text
        || ' returns ' || pg_get_function_result(p.oid)
        || ' args ' || pg_get_function_arguments(p.oid)
        || ' language ' || l.lanname || ' volatility ' || p.provolatile::text
        || ' parallel ' || p.proparallel::text || ' strict ' || p.proisstrict
        || ' secdef ' || p.prosecdef || ' leakproof ' || p.proleakproof
        || ' rows ' || p.prorows || ' cost ' || p.procost
        || ' config ' || coalesce(p.proconfig::text, '-')
        || ' acl ' || coalesce(p.proacl::text, '-')
        || ' comment ' || coalesce(obj_description(p.oid, 'pg_proc'), '-')
        || ' body ' || CASE WHEN l.lanname = 'c' THEN p.prosrc || ' in ' || coalesce(p.probin, '-')
                            ELSE coalesce(pg_get_function_sqlbody(p.oid), p.prosrc) END AS line
      FROM members m JOIN pg_proc p ON m.classid = 'pg_proc'::regclass AND p.oid = m.objid
      JOIN pg_language l ON l.oid = p.prolang
    UNION ALL
    SELECT 'schema ' || n.nspname || ' acl ' || coalesce(n.nspacl::text, '-')
        || ' comment ' || coalesce(obj_description(n.oid, 'pg_namespace'), '-')
      FROM members m JOIN pg_namespace n ON m.classid = 'pg_namespace'::regclass AND n.oid = m.objid
    UNION ALL
    SELECT 'relation ' || r.oid::regclass::text || ' kind ' || r.relkind::text
        || ' options ' || coalesce(r.reloptions::text, '-')
        || ' acl ' || coalesce(r.relacl::text, '-')
        || ' comment ' || coalesce(obj_description(r.oid, 'pg_class'), '-')
        || CASE WHEN r.relkind = 'v' THEN ' view ' || pg_get_viewdef(r.oid) ELSE '' END
      FROM rels r
    UNION ALL
    SELECT 'column ' || r.oid::regclass::text || ' #' || a.attnum || ' ' || a.attname
        || ' ' || format_type(a.atttypid, a.atttypmod)
        || ' collate ' || coalesce((SELECT co.collname FROM pg_collation co WHERE co.oid = a.attcollation), '-')
        || ' notnull ' || a.attnotnull
        || ' default ' || coalesce(pg_get_expr(ad.adbin, ad.adrelid), '-')
        || ' comment ' || coalesce(col_description(r.oid, a.attnum), '-')
      FROM rels r JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_attrdef ad ON ad.adrelid = r.oid AND ad.adnum = a.attnum
    UNION ALL
    SELECT 'index ' || pg_get_indexdef(i.indexrelid)
        || ' options ' || coalesce((SELECT c.reloptions::text FROM pg_class c WHERE c.oid = i.indexrelid), '-')
      FROM rels r JOIN pg_index i ON i.indrelid = r.oid
    UNION ALL
    SELECT 'constraint ' || r.oid::regclass::text || ' ' || co.conname || ' ' || pg_get_constraintdef(co.oid)
      FROM rels r JOIN pg_constraint co ON co.conrelid = r.oid
    UNION ALL
    SELECT 'trigger ' || r.oid::regclass::text || ' ' || pg_get_triggerdef(tg.oid)
        || ' enabled ' || tg.tgenabled::text
      FROM rels r JOIN pg_trigger tg ON tg.tgrelid = r.oid AND NOT tg.tgisinternal
    UNION ALL
    SELECT 'sequence ' || s.seqrelid::regclass::text || ' ' || format_type(s.seqtypid, NULL)
        || ' start ' || s.seqstart || ' increment ' || s.seqincrement || ' max ' || s.seqmax
        || ' min ' || s.seqmin || ' cache ' || s.seqcache || ' cycle ' || s.seqcycle
      FROM rels r JOIN pg_sequence s ON s.seqrelid = r.oid
    UNION ALL
    SELECT 'type ' || t.oid::regtype::text || ' kind ' || t.typtype::text
        || ' comment ' || coalesce(obj_description(t.oid, 'pg_type'), '-')
        || ' acl ' || coalesce(t.typacl::text, '-')
        || ' columns ' || coalesce((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
                                      FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped), '-')
      FROM members m JOIN pg_type t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
    UNION ALL
    SELECT 'config ' || c::regclass::text || ' where ' || coalesce(w, '-')
      FROM ext, unnest(ext.extconfig, ext.extcondition) AS u(c, w)
) AS described
ORDER BY line"#;

fn describe(db: &mut Client) -> BTreeSet<String> {
    db.column::<String>(DESCRIBE, &[]).into_iter().collect()
}

/// idem.keys' columns as 0.1.0 to 0.4.0 created them, and as a fresh install creates them now.
const KEYS_ORDER_0_1_0: [&str; 15] = [
    "fence",
    "claimed_at",
    "lease_expires_at",
    "expires_at",
    "purge_after",
    "ttl",
    "attempt",
    "response_code",
    "state",
    "tenant",
    "key",
    "request_hash",
    "response_body",
    "checkpoint_phase",
    "checkpoint_data",
];
const KEYS_ORDER: [&str; 15] = [
    "purge_after",
    "fence",
    "claimed_at",
    "expires_at",
    "ttl",
    "state",
    "tenant",
    "key",
    "attempt",
    "response_code",
    "lease_expires_at",
    "request_hash",
    "response_body",
    "checkpoint_phase",
    "checkpoint_data",
];

/// The names of idem.keys' columns, in order.
fn keys_order(db: &mut Client) -> Vec<String> {
    db.column(
        "SELECT attname::text FROM pg_catalog.pg_attribute
          WHERE attrelid = 'idem.keys'::regclass AND attnum > 0 AND NOT attisdropped
          ORDER BY attnum",
        &[],
    )
}

/// The description without the positions of idem.keys' columns (in their own lines, and in the
/// line of the table's row type, which PostgreSQL 18 lists as a member): `keys_order` says those.
fn without_keys_order(described: BTreeSet<String>) -> BTreeSet<String> {
    described
        .into_iter()
        .map(|line| {
            if let Some(numbered) = line.strip_prefix("column idem.keys #") {
                let (_attnum, rest) = numbered.split_once(' ').expect("#attnum name ...");
                return format!("column idem.keys {rest}");
            }
            match (
                line.starts_with("type idem.keys "),
                line.split_once(" columns "),
            ) {
                (true, Some((head, columns))) => {
                    let mut columns: Vec<&str> = columns.split(", ").collect();
                    columns.sort_unstable();
                    format!("{head} columns {}", columns.join(", "))
                }
                _ => line,
            }
        })
        .collect()
}

/// Keys in every state under 0.1.0, their answers before and after the update, the upgraded
/// schema against a fresh install.
#[test]
fn update_from_the_released_version_keeps_every_key() {
    if native_only(NATIVE_ONLY) {
        return;
    }
    install_released_script();
    let server = Server::start_bare(&["shared_preload_libraries = 'pg_idem'"]);
    let mut db = server.client();
    db.batch_execute(&format!("CREATE EXTENSION pg_idem VERSION '{RELEASED}'"))
        .unwrap();
    assert_eq!(extversion(&mut db), RELEASED);

    // completed, failed, claimed in lease mode (live), stalled with a checkpoint, batch, streams
    let done = claim(&mut db, "acme", "done", "h");
    complete(
        &mut db,
        "acme",
        "done",
        done.fence.unwrap(),
        201,
        r#"{"payment_id": 7}"#,
    );
    let failed = claim(&mut db, "acme", "failed", "h");
    db.execute(
        "SELECT idem_fail_final('acme', 'failed', $1, 402, '{\"error\": \"declined\"}')",
        &[&failed.fence.unwrap()],
    )
    .unwrap();
    let live = claim_with(&mut db, "globex", "live", "h", "10 minutes", None);
    let stalled = claim_with(&mut db, "globex", "stalled", "h", "300 ms", None);
    db.execute(
        "SELECT idem_checkpoint('globex', 'stalled', $1, 'charged', '{\"charge\": \"ch_1\"}')",
        &[&stalled.fence.unwrap()],
    )
    .unwrap();
    let batch: Vec<String> = db.column(
        "SELECT outcome FROM idem_claim_many('initech', ARRAY['b1', 'b2'], ARRAY['h', 'h'])",
        &[],
    );
    assert_eq!(batch, ["claimed", "claimed"]);
    let released = claim(&mut db, "acme", "released", "h");
    db.execute(
        "SELECT idem_release('acme', 'released', $1)",
        &[&released.fence.unwrap()],
    )
    .unwrap();
    let forgotten = claim(&mut db, "acme", "forgotten", "h");
    complete(
        &mut db,
        "acme",
        "forgotten",
        forgotten.fence.unwrap(),
        200,
        "{}",
    );
    db.execute("SELECT idem_forget('acme', 'forgotten')", &[])
        .unwrap();
    db.execute("SELECT idem_claim_seq('acme', 'orders', 41)", &[])
        .unwrap();
    thread::sleep(Duration::from_millis(400)); // the stalled key's lease passes

    let fence_before = max_fence(&mut db);
    let replay_done = claim(&mut db, "acme", "done", "h");
    let replay_failed = claim(&mut db, "acme", "failed", "h");
    assert_eq!(replay_done.outcome, "completed");
    assert_eq!(replay_failed.outcome, "failed");
    let watermark: Option<i64> = db
        .query_one("SELECT idem_watermark('acme', 'orders')", &[])
        .unwrap()
        .get(0);

    db.batch_execute("ALTER EXTENSION pg_idem UPDATE").unwrap();
    assert_eq!(extversion(&mut db), current_version());

    // the same connection (a pooled backend) and a new one answer as before
    for db in [&mut db, &mut server.client()] {
        assert_eq!(claim(db, "acme", "done", "h"), replay_done);
        assert_eq!(claim(db, "acme", "failed", "h"), replay_failed);
        assert_eq!(claim(db, "acme", "done", "other").outcome, "mismatch");
        assert_eq!(claim(db, "globex", "live", "h").outcome, "in_progress");
        assert_eq!(claim(db, "initech", "b1", "h").outcome, "in_progress");
        let w: Option<i64> = db
            .query_one("SELECT idem_watermark('acme', 'orders')", &[])
            .unwrap()
            .get(0);
        assert_eq!(w, watermark);
    }
    let mut db = server.client();
    // the stalled key is taken over, with its checkpoint, under a fence above every old one
    let takeover = claim(&mut db, "globex", "stalled", "h");
    assert_eq!(takeover.outcome, "claimed");
    assert_eq!(takeover.attempt, Some(2));
    assert_eq!(takeover.checkpoint_phase.as_deref(), Some("charged"));
    assert!(takeover.fence.unwrap() > fence_before);
    // released and forgotten keys are claimed afresh, above every old fence too
    for key in ["released", "forgotten"] {
        let again = claim(&mut db, "acme", key, "h");
        assert_eq!(
            (again.outcome.as_str(), again.attempt),
            ("claimed", Some(1))
        );
        assert!(again.fence.unwrap() > takeover.fence.unwrap());
    }
    // fences handed out before the update still hold their keys, and stale ones are refused
    complete(&mut db, "globex", "live", live.fence.unwrap(), 200, "{}");
    let stale = try_complete(
        &mut db,
        "globex",
        "stalled",
        stalled.fence.unwrap(),
        200,
        "{}",
    )
    .expect_err("the old attempt's fence is stale");
    assert_eq!(sqlstate(&stale), "55000");
    assert_eq!(
        db.query_one(
            "SELECT outcome FROM idem_claim_seq('acme', 'orders', 41)",
            &[]
        )
        .unwrap()
        .get::<_, String>(0),
        "duplicate"
    );
    let stats = db
        .query_one("SELECT keys_completed FROM idem_stats()", &[])
        .unwrap();
    assert!(stats.get::<_, i64>(0) >= 1);
    // 0.4.0: a message consumer sees keys completed before the update as processed, and new
    // messages as new
    let consumed = |db: &mut Client, key: &str| -> bool {
        db.query_one("SELECT idem_consume('acme', $1)", &[&key])
            .unwrap()
            .get(0)
    };
    assert!(
        !consumed(&mut db, "done"),
        "a key completed before the update"
    );
    assert!(consumed(&mut db, "message-1"));
    assert!(!consumed(&mut db, "message-1"));
    // 0.4.0: the request path runs with the caller's rights (no SECURITY DEFINER, no SET)
    let definers: Vec<String> = db
        .column("SELECT p.proname::text FROM pg_proc p \
              JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e' \
              JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_idem' \
             WHERE p.proname IN ('idem_claim', 'idem_complete', 'idem_fail_final', 'idem_release', \
                                 'idem_heartbeat', 'idem_checkpoint', 'idem_assert_fence', 'idem_consume') \
               AND (p.prosecdef OR p.proconfig IS NOT NULL)",
            &[],);
    assert!(
        definers.is_empty(),
        "still SECURITY DEFINER or SET after the update: {definers:?}"
    );

    // the upgraded schema is a fresh install's
    db.batch_execute("CREATE DATABASE fresh").unwrap();
    let mut fresh = server.client_db("fresh");
    fresh.batch_execute("CREATE EXTENSION pg_idem").unwrap();
    assert_eq!(extversion(&mut fresh), current_version());
    let upgraded = without_keys_order(describe(&mut db));
    let installed = without_keys_order(describe(&mut fresh));
    // the one difference: the order of idem.keys' columns, which an update leaves as it was
    // (changing it would rewrite every row) and a fresh install of 0.5.0 chooses for narrower
    // message rows (sql/schema.sql)
    assert_eq!(
        keys_order(&mut db),
        KEYS_ORDER_0_1_0,
        "an update keeps the order"
    );
    assert_eq!(
        keys_order(&mut fresh),
        KEYS_ORDER,
        "a fresh install's order"
    );
    let only_upgraded: Vec<_> = upgraded.difference(&installed).collect();
    let only_fresh: Vec<_> = installed.difference(&upgraded).collect();
    assert!(
        only_upgraded.is_empty() && only_fresh.is_empty(),
        "the upgraded schema differs from a fresh install of {}:\n  only after the update:\n    {}\n  only in a fresh install:\n    {}",
        current_version(),
        only_upgraded.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n    "),
        only_fresh.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n    "),
    );
    assert!(upgraded.len() > 50, "the description covers the extension");
}

#[test]
fn a_fresh_install_is_the_current_version_and_update_is_a_no_op() {
    if native_only(NATIVE_ONLY) {
        return;
    }
    let server = Server::start(&[]);
    let mut db = server.client();
    assert_eq!(extversion(&mut db), current_version());
    let before = describe(&mut db);
    let notices = db.batch_execute("ALTER EXTENSION pg_idem UPDATE");
    assert!(notices.is_ok());
    assert_eq!(extversion(&mut db), current_version());
    assert_eq!(describe(&mut db), before);
}

#[test]
fn privileges_a_dba_set_survive_the_update() {
    if native_only(NATIVE_ONLY) {
        return;
    }
    // 0.4.0 drops and creates again the functions whose result type changes (idem_claim, the
    // statistics): the privileges a DBA set on them must come back as they were, not as a
    // fresh install's (an idem_claim revoked from PUBLIC must not become PUBLIC's again)
    let server = Server::start(&[]);
    install_released_script();
    let mut db = server.client();
    db.batch_execute(
        "DROP EXTENSION pg_idem; CREATE EXTENSION pg_idem VERSION '0.1.0'; \
         ALTER EXTENSION pg_idem UPDATE TO '0.3.0'; \
         CREATE ROLE payments_app LOGIN; CREATE ROLE \"Other App\" LOGIN; CREATE ROLE dashboards LOGIN; \
         REVOKE EXECUTE ON FUNCTION idem_claim(text, text, text, interval, interval) FROM PUBLIC; \
         GRANT EXECUTE ON FUNCTION idem_claim(text, text, text, interval, interval) TO payments_app; \
         GRANT EXECUTE ON FUNCTION idem_claim(text, text, text, interval, interval) TO \"Other App\" WITH GRANT OPTION; \
         GRANT EXECUTE ON FUNCTION idem_stats() TO dashboards; \
         REVOKE EXECUTE ON FUNCTION idem_counters() FROM pg_monitor",
    )
    .unwrap();
    let privileges = |db: &mut Client| -> Vec<(String, String, bool)> {
        db.query(
            "SELECT p.proname::text, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, \
                    a.is_grantable \
               FROM pg_proc p, aclexplode(p.proacl) a \
              WHERE p.proname IN ('idem_claim', 'idem_stats', 'idem_counters') \
                AND p.pronamespace = 'public'::regnamespace \
              ORDER BY 1, 2",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
    };
    let before = privileges(&mut db);
    assert!(
        before.contains(&("idem_claim".into(), "payments_app".into(), false)),
        "{before:?}"
    );
    db.batch_execute("ALTER EXTENSION pg_idem UPDATE").unwrap();
    assert_eq!(extversion(&mut db), current_version());
    assert_eq!(privileges(&mut db), before);
    let public_may_claim: bool = db
        .query_one(
            "SELECT has_function_privilege('public', 'idem_claim(text, text, text, interval, interval)', 'EXECUTE')",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        !public_may_claim,
        "the revoke from PUBLIC holds after the update"
    );
    let leftovers: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname = 'pg_idem_kept_acl'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(leftovers, 0);
}

/// 0.5.0 stores a consumed message as a narrow row (fence, claimed_at, expires_at, ttl,
/// attempt and request_hash NULL). Under the 0.4.0 schema (NOT NULL columns) the new library
/// still writes whole rows, on the engine and the SPI path; after the update it writes narrow
/// ones; messages of either kind answer the same to consumes and claims, and expire and are
/// purged alike.
#[test]
fn messages_consumed_before_the_update_keep_whole_rows_and_new_ones_are_narrow() {
    if native_only(NATIVE_ONLY) {
        return;
    }
    // the purge worker stays paused: this test purges itself
    let server = Server::start(&["pg_idem.purge_interval = 0"]);
    install_released_script();
    let mut db = server.client();
    db.batch_execute(
        "DROP EXTENSION pg_idem; CREATE EXTENSION pg_idem VERSION '0.1.0'; \
         ALTER EXTENSION pg_idem UPDATE TO '0.4.0'",
    )
    .unwrap();
    let consume = |db: &mut Client, key: &str, ttl: &str| -> bool {
        db.query_one(
            "SELECT idem_consume('acme', $1, $2::text::interval)",
            &[&key, &ttl],
        )
        .unwrap()
        .get(0)
    };
    // (fence, expires_at, ttl, attempt, request_hash) IS NULL, per key
    let narrow = |db: &mut Client, key: &str| -> bool {
        db.query_one(
            "SELECT fence IS NULL AND claimed_at IS NULL AND expires_at IS NULL AND ttl IS NULL \
                    AND attempt IS NULL AND request_hash IS NULL \
               FROM idem.keys WHERE tenant = 'acme' AND key = $1",
            &[&key],
        )
        .unwrap()
        .get(0)
    };
    let whole = |db: &mut Client, key: &str| -> bool {
        db.query_one(
            "SELECT fence IS NOT NULL AND claimed_at IS NOT NULL AND expires_at IS NOT NULL \
                    AND ttl IS NOT NULL AND attempt IS NOT NULL AND request_hash IS NOT NULL \
               FROM idem.keys WHERE tenant = 'acme' AND key = $1",
            &[&key],
        )
        .unwrap()
        .get(0)
    };
    let spi_path =
        "CREATE OR REPLACE FUNCTION pg_temp.touch() RETURNS trigger LANGUAGE plpgsql AS \
                    'BEGIN RETURN NEW; END'; \
                    CREATE TRIGGER force_spi BEFORE INSERT ON idem.keys \
                    FOR EACH ROW EXECUTE FUNCTION pg_temp.touch()";
    let no_spi_path = "DROP TRIGGER force_spi ON idem.keys";
    // `{prefix}-engine` and `{prefix}-short` (ttl 1 s) on the engine path, `{prefix}-spi` on the
    // SPI path (a trigger on idem.keys)
    let consume_on_both_paths = |db: &mut Client, prefix: &str| -> [String; 3] {
        let keys = ["engine", "short", "spi"].map(|k| format!("{prefix}-{k}"));
        assert!(consume(db, &keys[0], "1 hour"));
        assert!(consume(db, &keys[1], "1 second"));
        db.batch_execute(spi_path).unwrap();
        assert!(consume(db, &keys[2], "1 hour"));
        db.batch_execute(no_spi_path).unwrap();
        keys
    };
    // under 0.4.0: whole rows, on both paths
    for key in consume_on_both_paths(&mut db, "old") {
        assert!(whole(&mut db, &key), "{key} is a whole row under 0.4.0");
    }
    db.batch_execute("ALTER EXTENSION pg_idem UPDATE").unwrap();
    assert_eq!(extversion(&mut db), current_version());
    // after the update: narrow rows, on both paths
    for key in consume_on_both_paths(&mut db, "new") {
        assert!(
            narrow(&mut db, &key),
            "{key} is a narrow row after the update"
        );
    }
    for key in ["old-engine", "old-spi", "new-engine", "new-spi"] {
        assert!(!consume(&mut db, key, "1 hour"), "{key} was processed");
        let row = db
            .query_one(
                "SELECT outcome, attempt, fence, expires_at > now() + interval '50 minutes' \
                   FROM idem_claim('acme', $1, '')",
                &[&key],
            )
            .unwrap();
        let answer: (String, Option<i32>, Option<i64>, bool) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        assert_eq!(answer, ("completed".into(), Some(1), None, true), "{key}");
        let mismatch: String = db
            .query_one("SELECT outcome FROM idem_claim('acme', $1, 'h')", &[&key])
            .unwrap()
            .get(0);
        assert_eq!(mismatch, "mismatch", "{key}");
    }
    // both kinds expire, count as expired, are purged, and are new again
    thread::sleep(Duration::from_millis(1_200));
    let expired: i64 = db
        .query_one("SELECT keys_expired FROM idem_stats()", &[])
        .unwrap()
        .get(0);
    assert_eq!(expired, 2);
    let purged: i64 = db.query_one("SELECT idem_purge()", &[]).unwrap().get(0);
    assert_eq!(purged, 2);
    for key in ["old-short", "new-short"] {
        assert!(
            consume(&mut db, key, "1 hour"),
            "{key} is new after its ttl"
        );
        assert!(narrow(&mut db, key), "{key} is a narrow row now");
    }
    amcheck(&mut db);

    // the update kept 0.4.0's column order; a dump restored into a fresh install has the new
    // one, with every row and answer as before
    assert_eq!(keys_order(&mut db), KEYS_ORDER_0_1_0);
    db.batch_execute("CREATE DATABASE restored").unwrap();
    let file = server.dir().join("updated.dump");
    let file = file.to_str().unwrap();
    let port = server.port.to_string();
    let common = ["-h", "127.0.0.1", "-p", &port, "-U", dba_role()];
    let dump = server.run_bin(
        "pg_dump",
        &[&common[..], &["-Fc", "-f", file, "postgres"]].concat(),
    );
    assert!(dump.status.success(), "pg_dump: {dump:?}");
    let restore = server.run_bin(
        "pg_restore",
        &[&common[..], &["-d", "restored", file]].concat(),
    );
    assert!(restore.status.success(), "pg_restore: {restore:?}");
    let mut restored = server.client_db("restored");
    assert_eq!(keys_order(&mut restored), KEYS_ORDER);
    assert_eq!(all_keys(&mut restored), all_keys(&mut db));
    for key in ["old-engine", "old-spi", "new-engine", "new-spi"] {
        assert!(
            !consume(&mut restored, key, "1 hour"),
            "{key} was processed"
        );
    }
    amcheck(&mut restored);
}

/// A version that landed never changes: every update script (and the frozen 0.1.0 install
/// script) the released 0.5.0 shipped is here byte for byte as commit ef35c48 has it, so a
/// database installed from that release reaches this version by the scripts it names. What
/// changed after it is 0.6.0's (sql/pg_idem--0.5.0--0.6.0.sql).
#[test]
fn the_scripts_the_released_0_5_0_shipped_are_unchanged() {
    let (version, commit) = RELEASE_0_5_0;
    let tmp = std::env::temp_dir().join(format!("pg_idem_released_{}", std::process::id()));
    let tree = match git_tree_at(commit, &tmp) {
        Ok(tree) => tree,
        Err(why) => {
            skip_test(
                "git_history",
                &format!("the released {version} ({commit}) is not in this clone: {why}"),
            );
            return;
        }
    };
    let here = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sql");
    let mut shipped: Vec<String> = std::fs::read_dir(tree.join("sql"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("pg_idem--") && name.ends_with(".sql"))
        .collect();
    shipped.sort();
    assert!(
        shipped.contains(&format!("pg_idem--0.4.0--{version}.sql")),
        "{shipped:?}"
    );
    for name in &shipped {
        let then = std::fs::read(tree.join("sql").join(name)).unwrap();
        let now = std::fs::read(here.join(name))
            .unwrap_or_else(|e| panic!("sql/{name}, shipped with {version}, is gone: {e}"));
        assert!(
            then == now,
            "sql/{name} differs from what {version} shipped ({commit}): a released script \
             never changes; put the change into the next version's update script"
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

/// The released 0.5.0 (commit ef35c48: 0.1.0 and the update scripts up to 0.5.0, which
/// `the_scripts_the_released_0_5_0_shipped_are_unchanged` holds as it shipped them) has none of
/// what came after it: no idem_version(), neither trigger of pg_idem's, an idem_distribute that
/// drops none. The update to this version adds them, keeps every key, and leaves a database
/// that is a fresh install's.
#[test]
fn update_from_the_released_0_5_0_adds_what_came_after_it() {
    if native_only(NATIVE_ONLY) {
        return;
    }
    let (released, _) = RELEASE_0_5_0;
    let server = Server::start(&["pg_idem.purge_interval = 0"]);
    install_released_script();
    let mut db = server.client();
    db.batch_execute(&format!(
        "DROP EXTENSION pg_idem; CREATE EXTENSION pg_idem VERSION '{RELEASED}'; \
         ALTER EXTENSION pg_idem UPDATE TO '{released}'"
    ))
    .unwrap();
    assert_eq!(extversion(&mut db), released);
    let has = |db: &mut Client, what: &str| -> bool {
        let sql = match what {
            "idem_version" => "SELECT to_regprocedure('idem_version()') IS NOT NULL".to_string(),
            "idem_distribute drops triggers" => "SELECT prosrc LIKE '%DROP TRIGGER%' FROM pg_proc \
                 WHERE oid = 'idem_distribute(integer)'::regprocedure"
                .to_string(),
            trigger => format!(
                "SELECT EXISTS (SELECT FROM pg_trigger WHERE tgname = '{trigger}' \
                   AND tgenabled = 'A' AND NOT tgisinternal)"
            ),
        };
        db.query_one(&sql, &[]).unwrap().get(0)
    };
    let added = [
        "idem_version",
        "lift_fence_clock",
        "tenant_grants_changed",
        "idem_distribute drops triggers",
    ];
    for what in added {
        assert!(!has(&mut db, what), "the released {released} has no {what}");
    }

    let done = claim(&mut db, "acme", "done", "h");
    complete(&mut db, "acme", "done", done.fence.unwrap(), 201, "{}");
    let open = claim_with(&mut db, "acme", "open", "h", "10 minutes", None);
    let consumed: bool = db
        .query_one("SELECT idem_consume('acme', 'message-1')", &[])
        .unwrap()
        .get(0);
    assert!(consumed);
    db.batch_execute("CREATE ROLE app_user; SELECT idem_grant_tenant('app_user', 'acme')")
        .unwrap();
    let keys_before = all_keys(&mut db);

    db.batch_execute("ALTER EXTENSION pg_idem UPDATE").unwrap();
    assert_eq!(extversion(&mut db), current_version());
    for what in added {
        assert!(has(&mut db, what), "{what} after the update");
    }
    let mut db = server.client();
    let version: String = db.query_one("SELECT idem_version()", &[]).unwrap().get(0);
    assert_eq!(version, current_version());
    assert_eq!(all_keys(&mut db), keys_before);
    assert_eq!(claim(&mut db, "acme", "done", "h").outcome, "completed");
    assert_eq!(claim(&mut db, "acme", "open", "h").outcome, "in_progress");
    complete(&mut db, "acme", "open", open.fence.unwrap(), 200, "{}");
    let again: bool = db
        .query_one("SELECT idem_consume('acme', 'message-1')", &[])
        .unwrap()
        .get(0);
    assert!(!again, "a message consumed under {released}");

    db.batch_execute("CREATE DATABASE fresh").unwrap();
    let mut fresh = server.client_db("fresh");
    fresh.batch_execute("CREATE EXTENSION pg_idem").unwrap();
    let upgraded = without_keys_order(describe(&mut db));
    let installed = without_keys_order(describe(&mut fresh));
    let only_upgraded: Vec<_> = upgraded.difference(&installed).collect();
    let only_fresh: Vec<_> = installed.difference(&upgraded).collect();
    assert!(
        only_upgraded.is_empty() && only_fresh.is_empty(),
        "{released} updated differs from a fresh install of {}:\n  only after the update:\n    {}\n  only in a fresh install:\n    {}",
        current_version(),
        only_upgraded.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n    "),
        only_fresh.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n    "),
    );
    let triggers: Vec<_> = upgraded
        .iter()
        .filter(|l| l.starts_with("trigger "))
        .collect();
    assert_eq!(triggers.len(), 2, "pg_idem's two triggers: {triggers:?}");
}
